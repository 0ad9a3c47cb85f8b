"""distrl: fast PPO on vectorized environments, scaled out with torch.distributed and torchrun.

The public API (``import distrl``):

    make_config(task, *cli_words, **overrides) -> TrainConfig
    load_config("runs/x/config.yaml")          -> TrainConfig (train a run again)
    train(cfg)                                  -> TrainResult (.policy, .run_dir, .metrics)
    load_policy(run_dir_or_checkpoint)          -> (ActorCritic, TrainConfig)
    save(policy, "policy.pt", cfg)              one file load_policy reads (result.save(path))
    evaluate(run_or_policy, episodes=10)        -> EvalResult (.mean, .std, .returns, .lengths)
    export(run_dir_or_checkpoint, "onnx")       -> ExportResult (.path, .metadata)
    average(run_dir, from_iteration=None)       -> AverageResult (.path): the weights' mean over
                                                   the run's last checkpoints, policy only
    register_task(name, make_env=... | gym=...) your own batched torch env or Gymnasium env
                                                (hooks=[...]: its callbacks; `distrl train
                                                --import MODULE` registers in every rank)
    Hooks                                       callbacks around each update (train(hooks=...));
                                                after_iteration returning False stops the run
    EvalCallback(every=10, episodes=10, target=None) evaluates as it trains, may stop at target
    register_network(name, actor=..., critic=...) your own actor and critic bodies
    check_env(env)                              test a VecEnv against the contract
    PPO("MlpPolicy", env, **sb3_kwargs)         Stable-Baselines3's shape: .learn(steps),
                                                .predict(obs), .save(path), PPO.load(path);
                                                DQN, SAC, TD3 alike

Names are imported on first use, so ``import distrl`` (and the CLI) stays quick.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from distrl.version import __version__

_EXPORTS = {
    "make_config": "distrl.api",
    "load_config": "distrl.api",
    "train": "distrl.api",
    "load_policy": "distrl.api",
    "save": "distrl.api",
    "evaluate": "distrl.api",
    "EvalResult": "distrl.evaluation",
    "TrainResult": "distrl.api",
    "TaskLike": "distrl.api",
    "export": "distrl.exporting",
    "ExportResult": "distrl.exporting",
    "average": "distrl.averaging",
    "AverageResult": "distrl.averaging",
    "register_task": "distrl.envs.registry",
    "Hooks": "distrl.hooks",
    "EvalCallback": "distrl.evaluation",
    "register_network": "distrl.policy.networks",
    "check_env": "distrl.envs.check",
    "TrainConfig": "distrl.config",
    "VecEnv": "distrl.envs.core",
    "ActionSpace": "distrl.envs.core",
    "ActorCritic": "distrl.policy.actor_critic",
    "PPO": "distrl.sb3",
    "DQN": "distrl.sb3",
    "SAC": "distrl.sb3",
    "TD3": "distrl.sb3",
}

__all__ = [
    "DQN",
    "PPO",
    "SAC",
    "TD3",
    "ActionSpace",
    "ActorCritic",
    "AverageResult",
    "EvalCallback",
    "EvalResult",
    "ExportResult",
    "Hooks",
    "TaskLike",
    "TrainConfig",
    "TrainResult",
    "VecEnv",
    "__version__",
    "average",
    "check_env",
    "evaluate",
    "export",
    "load_config",
    "load_policy",
    "make_config",
    "register_network",
    "register_task",
    "save",
    "train",
]

if TYPE_CHECKING:
    from distrl.api import (
        TaskLike,
        TrainResult,
        evaluate,
        load_config,
        load_policy,
        make_config,
        save,
        train,
    )
    from distrl.averaging import AverageResult, average
    from distrl.config import TrainConfig
    from distrl.envs.check import check_env
    from distrl.envs.core import ActionSpace, VecEnv
    from distrl.envs.registry import register_task
    from distrl.evaluation import EvalCallback, EvalResult
    from distrl.exporting import ExportResult
    from distrl.exporting import export_policy as export
    from distrl.hooks import Hooks
    from distrl.policy.actor_critic import ActorCritic
    from distrl.policy.networks import register_network
    from distrl.sb3 import DQN, PPO, SAC, TD3


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'distrl' has no attribute {name!r}")
    if name == "export":
        return importlib.import_module(module).export_policy
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(__all__)
