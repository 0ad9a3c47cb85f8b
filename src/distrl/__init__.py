"""distrl: fast PPO on vectorized environments, scaled out with torch.distributed and torchrun.

The public API (``import distrl``):

    make_config(task, *cli_words, **overrides) -> TrainConfig
    load_config("runs/x/config.yaml")          -> TrainConfig (train a run again)
    train(cfg)                                  -> TrainResult (.policy, .run_dir, .metrics)
    load_policy(run_dir_or_checkpoint)          -> (ActorCritic, TrainConfig)
    export(run_dir_or_checkpoint, "onnx")       -> ExportResult (.path, .metadata)
    average(run_dir, from_iteration=None)       -> AverageResult (.path): the weights' mean over
                                                   the run's last checkpoints, policy only
    register_task(name, make_env=... | gym=...) your own batched torch env or Gymnasium env
                                                (hooks=[...]: its callbacks; `distrl train
                                                --import MODULE` registers in every rank)
    Hooks                                       callbacks around each update (train(hooks=...))
    register_network(name, actor=..., critic=...) your own actor and critic bodies
    check_env(env)                              test a VecEnv against the contract

Names are imported on first use, so ``import distrl`` (and the CLI) stays quick.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "make_config": "distrl.api",
    "load_config": "distrl.api",
    "train": "distrl.api",
    "load_policy": "distrl.api",
    "TrainResult": "distrl.api",
    "export": "distrl.exporting",
    "ExportResult": "distrl.exporting",
    "average": "distrl.averaging",
    "AverageResult": "distrl.averaging",
    "register_task": "distrl.envs.registry",
    "Hooks": "distrl.runner.hooks",
    "register_network": "distrl.policy.networks",
    "check_env": "distrl.envs.check",
    "TrainConfig": "distrl.config",
    "VecEnv": "distrl.envs.core",
    "ActionSpace": "distrl.envs.core",
    "ActorCritic": "distrl.policy.actor_critic",
}

__all__ = [
    "ActionSpace",
    "ActorCritic",
    "AverageResult",
    "ExportResult",
    "Hooks",
    "TrainConfig",
    "TrainResult",
    "VecEnv",
    "__version__",
    "average",
    "check_env",
    "export",
    "load_config",
    "load_policy",
    "make_config",
    "register_network",
    "register_task",
    "train",
]

if TYPE_CHECKING:
    from distrl.api import TrainResult, load_config, load_policy, make_config, train
    from distrl.averaging import AverageResult, average
    from distrl.config import TrainConfig
    from distrl.envs.check import check_env
    from distrl.envs.core import ActionSpace, VecEnv
    from distrl.envs.registry import register_task
    from distrl.exporting import ExportResult
    from distrl.exporting import export_policy as export
    from distrl.policy.actor_critic import ActorCritic
    from distrl.policy.networks import register_network
    from distrl.runner.hooks import Hooks


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'distrl' has no attribute {name!r}")
    if name == "export":
        return importlib.import_module(module).export_policy
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(__all__)
