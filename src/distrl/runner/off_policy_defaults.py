"""Each off-policy algorithm's defaults (``AlgorithmSpec.defaults``): applied to the task's own
(tuned for PPO) before the user's flags, so that ``--algorithm sac`` alone trains. Settings
follow Stable-Baselines3's and CleanRL's (cited per algorithm); the env counts and update
ratios are distrl's, for batched envs, measured in docs/benchmarks.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from distrl.config import TrainConfig

Fields = dict[str, dict[str, Any]]


def _apply(cfg: TrainConfig, fields: Fields) -> TrainConfig:
    sections = {
        name: dataclasses.replace(getattr(cfg, name), **values) for name, values in fields.items()
    }
    return dataclasses.replace(cfg, **sections)


def _budget(cfg: TrainConfig, steps: int) -> TrainConfig:
    """``steps`` env steps of one rank as --agent.max-iterations (not as --agent.total-timesteps,
    which would silently win over a --agent.max-iterations of the user's)."""
    per_iteration = cfg.env.num_envs * cfg.agent.num_steps
    agent = dataclasses.replace(
        cfg.agent, total_timesteps=None, max_iterations=-(-steps // per_iteration)
    )
    return dataclasses.replace(cfg, agent=agent)


_OFF = {"obs_normalization": False, "reward_normalization": False}
"""The replay holds raw observations; a normalizer that moves would change old transitions'
inputs (SB3 and CleanRL train these learners unnormalized)."""

_STEPS = {"pendulum": 20_000, "cartpole": 100_000}
"""Env steps of one rank per task (rl-zoo3's budgets; pqn's cartpole: CleanRL's 500k); else 1M,
pqn 5M."""

_CONTINUOUS_TASKS: dict[str, Fields] = {
    "pendulum": {  # rl-zoo3's Pendulum-v1 entries for both: 20k steps at lr 1e-3
        "agent": {"learning_rate": 1e-3, "gamma": 0.99},
        "offpolicy": {"learning_starts": 1000, "buffer_size": 200_000},
    },
}


def _continuous(head: str, lr: float) -> Callable[[TrainConfig], TrainConfig]:
    """SAC and TD3 (SB3's MuJoCo settings: 256x256 ReLU, lr 3e-4 / 1e-3, batch 256, tau 0.005,
    10k random steps): 8 envs x 8 steps per iteration and 64 updates, one update per env step
    per rank."""

    def defaults(cfg: TrainConfig) -> TrainConfig:
        cfg = _apply(
            cfg,
            {
                "env": {"num_envs": 8},
                "policy": {
                    **_OFF,
                    "head": head,
                    "actor_hidden": (256, 256),
                    "critic_hidden": (256, 256),
                    "activation": "relu",
                    "layer_norm": False,
                },
                "agent": {
                    "num_steps": 8,
                    "learning_rate": lr,
                    "lr_schedule": "constant",
                    "max_grad_norm": float("inf"),
                    "adam_eps": 1e-8,
                    "save_interval": 1000,
                },
                "offpolicy": {"updates": 64, "learning_starts": 10_000, "batch_size": 256},
            },
        )
        cfg = _apply(cfg, _CONTINUOUS_TASKS.get(cfg.task, {}))
        return _budget(cfg, _STEPS.get(cfg.task, 1_000_000))

    return defaults


_DISCRETE_TASKS: dict[str, dict[str, Fields]] = {
    "dqn": {
        "cartpole": {  # rl-zoo3's CartPole-v1: the target held through each 128 updates
            "agent": {"learning_rate": 2.3e-3},
            "offpolicy": {
                "learning_starts": 1000,
                "buffer_size": 100_000,
                "updates": 128,
                "batch_size": 64,
                "target_interval": 128,
                "eps_fraction": 0.16,
            },
        },
    },
    "pqn": {
        "cartpole": {"agent": {"learning_rate": 1e-3}},
    },
}

_PQN_MINATAR: Fields = {
    "env": {"num_envs": 128},
    "policy": {"layer_norm": True},
    "agent": {"num_steps": 32, "num_epochs": 2, "num_minibatches": 32, "learning_rate": 5e-4},
    "offpolicy": {"eps_fraction": 0.1, "q_lambda": 0.65},
}
"""PQN's authors' MinAtar settings (purejaxql's ``config/alg/pqn_minatar.yaml``, adapted
from their Atari ones: 128 envs x 32 steps, 2 epochs of 32 minibatches, lr 5e-4 annealed
linearly, epsilon 1 -> 0.05 over a tenth of the run, lambda 0.65, gamma 0.99, grad norm 10),
on the task's own network (``minatar-cnn``: theirs, conv 16x3x3 and 128 units) with a
LayerNorm before each ReLU as theirs. Their optimizer is RAdam; distrl's is Adam."""


def _dqn(cfg: TrainConfig) -> TrainConfig:
    """DQN (SB3's rl-zoo CartPole: 256x256, lr 2.3e-3 there; CleanRL's hard target copies):
    16 envs x 16 steps per iteration, 64 updates of 128, the target copied every 100 updates,
    epsilon from 1 to 0.04 over 20% of the run."""
    cfg = _apply(
        cfg,
        {
            "env": {"num_envs": 16},
            "policy": {
                **_OFF,
                "actor_hidden": (256, 256),
                "activation": "relu",
                "layer_norm": False,
            },
            "agent": {
                "num_steps": 16,
                "learning_rate": 1e-3,
                "lr_schedule": "constant",
                "max_grad_norm": 10.0,
                "adam_eps": 1e-8,
                "save_interval": 500,
            },
            "offpolicy": {
                "updates": 64,
                "batch_size": 128,
                "learning_starts": 10_000,
                "tau": 1.0,
                "target_interval": 100,
                "eps_end": 0.04,
                "eps_fraction": 0.2,
            },
        },
    )
    cfg = _apply(cfg, _DISCRETE_TASKS["dqn"].get(cfg.task, {}))
    return _budget(cfg, _STEPS.get(cfg.task, 1_000_000))


def _pqn(cfg: TrainConfig) -> TrainConfig:
    """PQN (CleanRL's ``pqn.py``: 120x84 ReLU with LayerNorm, lr 2.5e-4 annealed linearly,
    4 epochs of 4 minibatches, max grad norm 10, epsilon 1 -> 0.05 over half the run,
    lambda 0.65): 32 envs x 32 steps per iteration."""
    cfg = _apply(
        cfg,
        {
            "env": {"num_envs": 32},
            "policy": {
                **_OFF,
                "actor_hidden": (120, 84),
                "activation": "relu",
                "layer_norm": True,
            },
            "agent": {
                "num_steps": 32,
                "num_epochs": 4,
                "num_minibatches": 4,
                "learning_rate": 2.5e-4,
                "lr_schedule": "linear",
                "max_grad_norm": 10.0,
                "adam_eps": 1e-8,
                "save_interval": 200,
            },
        },
    )
    if cfg.task.startswith("minatar-"):
        cfg = _apply(cfg, _PQN_MINATAR)
    cfg = _apply(cfg, _DISCRETE_TASKS["pqn"].get(cfg.task, {}))
    return _budget(cfg, 500_000 if cfg.task == "cartpole" else 5_000_000)


DEFAULTS: dict[str, Callable[[TrainConfig], TrainConfig]] = {
    "pqn": _pqn,
    "dqn": _dqn,
    "sac": _continuous("squashed-gaussian", 3e-4),
    "td3": _continuous("tanh", 1e-3),
}
