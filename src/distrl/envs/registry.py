"""Task registry: a task name maps to an env factory and a default training configuration.

Built-in tasks are the batched torch envs (``cartpole``, ``acrobot``, ``pendulum``). Any registered
Gymnasium id is available as ``gym:<Id>`` (built on demand, so the list below only shows examples).
``default_config`` returns a fresh config every call (config dataclasses are frozen; callers derive
variants with ``dataclasses.replace``).
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable
from dataclasses import dataclass

import torch

from distrl.config import AgentConfig, EnvConfig, TrainConfig
from distrl.envs.acrobot import Acrobot
from distrl.envs.cartpole import CartPole
from distrl.envs.core import VecEnv
from distrl.envs.pendulum import Pendulum

GYM_PREFIX = "gym:"


@dataclass(frozen=True)
class Task:
    """A trainable task: ``make_env(num_envs, device, max_episode_steps)`` and its defaults."""

    name: str
    description: str
    make_env: Callable[[int, torch.device, int | None], VecEnv]
    default_config: Callable[[], TrainConfig]


def _config(task: str, num_envs: int, **agent: object) -> Callable[[], TrainConfig]:
    """Factory of a fresh TrainConfig for ``task`` with ``num_envs`` and AgentConfig overrides."""

    def make() -> TrainConfig:
        return TrainConfig(
            task=task,
            env=EnvConfig(num_envs=num_envs),
            agent=dataclasses.replace(AgentConfig(), **agent),
        )

    return make


def _mujoco(cls_name: str) -> Callable[[int, torch.device, int | None], VecEnv]:
    """Factory of a batched MuJoCo env from ``distrl.envs.mujoco`` (imported only when built)."""

    def make(num_envs: int, device: torch.device, max_episode_steps: int | None = None) -> VecEnv:
        try:
            from distrl.envs import mujoco
        except ModuleNotFoundError as e:
            if e.name != "mujoco":
                raise
            raise ImportError(
                "the MuJoCo tasks need the mujoco extra: make setup-mujoco, or "
                "pip install -c constraints.txt -e '.[mujoco]'"
            ) from e
        return getattr(mujoco, cls_name)(num_envs, device, max_episode_steps)

    return make


def _mujoco_config(task: str) -> Callable[[], TrainConfig]:
    """CleanRL's MuJoCo PPO (2048 steps per iteration, 10 epochs of 32 minibatches, lr 3e-4
    decayed linearly, 1M steps) with the 2048 steps spread over 32 envs of 64 steps."""
    return _config(
        task,
        num_envs=32,
        num_steps=64,
        num_epochs=10,
        num_minibatches=32,
        learning_rate=3e-4,
        lr_schedule="linear",
        gamma=0.99,
        gae_lambda=0.95,
        clip_coef=0.2,
        ent_coef=0.0,
        vf_coef=0.5,
        max_grad_norm=0.5,
        max_iterations=488,
    )


_BUILTINS: dict[str, Task] = {
    t.name: t
    for t in (
        Task(
            name="cartpole",
            description="CartPole-v1 balance (discrete 2), batched torch; max return 500",
            make_env=CartPole,
            default_config=_config(
                "cartpole",
                num_envs=128,
                num_steps=32,
                num_epochs=5,
                num_minibatches=4,
                learning_rate=1e-3,
                lr_schedule="adaptive",
                gamma=0.99,
                ent_coef=0.0,
                max_iterations=100,
            ),
        ),
        Task(
            name="acrobot",
            description="Acrobot-v1 swing-up (discrete 3), batched torch; return -500..~-60",
            make_env=Acrobot,
            default_config=_config(
                "acrobot",
                num_envs=256,
                num_steps=32,
                num_epochs=5,
                num_minibatches=4,
                learning_rate=1e-3,
                gamma=0.99,
                max_iterations=200,
            ),
        ),
        Task(
            name="pendulum",
            description="Pendulum-v1 swing-up (continuous 1-D torque), batched torch; "
            "return ~-1400..~-150",
            make_env=Pendulum,
            # Short effective horizon (gamma 0.9, as in rl-zoo's PPO Pendulum settings): the
            # cost is dense and a swing-up decision pays off within ~10-20 steps.
            default_config=_config(
                "pendulum",
                num_envs=256,
                num_steps=64,
                num_epochs=10,
                num_minibatches=4,
                learning_rate=1e-3,
                gamma=0.9,
                gae_lambda=0.95,
                max_iterations=300,
            ),
        ),
        Task(
            name="halfcheetah",
            description="HalfCheetah-v5 run (continuous 6-D), batched MuJoCo; needs the mujoco "
            "extra",
            make_env=_mujoco("HalfCheetah"),
            default_config=_mujoco_config("halfcheetah"),
        ),
        Task(
            name="hopper",
            description="Hopper-v5 hop (continuous 3-D), batched MuJoCo; needs the mujoco extra",
            make_env=_mujoco("Hopper"),
            default_config=_mujoco_config("hopper"),
        ),
        Task(
            name="walker2d",
            description="Walker2d-v5 walk (continuous 6-D), batched MuJoCo; needs the mujoco extra",
            make_env=_mujoco("Walker2d"),
            default_config=_mujoco_config("walker2d"),
        ),
        Task(
            name="ant",
            description="Ant-v5 walk (continuous 8-D), batched MuJoCo; needs the mujoco extra",
            make_env=_mujoco("Ant"),
            default_config=_mujoco_config("ant"),
        ),
    )
}


def _faulty_cartpole(
    num_envs: int, device: torch.device, max_episode_steps: int | None = None
) -> VecEnv:
    from distrl.envs.faulty import from_environment

    return from_environment(num_envs, device, max_episode_steps)


# Accepted by name but not listed by `distrl list`: test fixtures, not tasks to train.
_HIDDEN: dict[str, Task] = {
    "faulty-cartpole": Task(
        name="faulty-cartpole",
        description="test: fault injection (cartpole that raises or returns NaN/Inf on cue, "
        "set by DISTRL_FAULTS; see distrl.envs.faulty)",
        make_env=_faulty_cartpole,
        default_config=_config("faulty-cartpole", num_envs=16, num_steps=8, max_iterations=10),
    ),
}

_GYM_EXAMPLES: dict[str, str] = {
    "CartPole-v1": "Gymnasium CartPole-v1 (discrete), stepped through the Gymnasium adapter",
    "Acrobot-v1": "Gymnasium Acrobot-v1 (discrete), stepped through the Gymnasium adapter",
    "Pendulum-v1": "Gymnasium Pendulum-v1 (continuous), stepped through the Gymnasium adapter",
    "HalfCheetah-v5": "Gymnasium MuJoCo HalfCheetah-v5 (continuous); needs the mujoco extra: "
    "pip install 'distrl[mujoco]'",
}


def _gym_task(name: str, description: str | None = None) -> Task:
    from distrl.envs.gym import resolve_env_id  # imports Gymnasium only when a gym task is used

    env_id = name[len(GYM_PREFIX) :]
    resolve_env_id(env_id)  # fail now, with close matches, rather than when the env is built

    def make_env(
        num_envs: int, device: torch.device, max_episode_steps: int | None = None
    ) -> VecEnv:
        from distrl.envs.gym import GymVecEnv

        return GymVecEnv(env_id, num_envs, device, max_episode_steps=max_episode_steps)

    return Task(
        name=name,
        description=description or f"Gymnasium {env_id} through the Gymnasium adapter",
        make_env=make_env,
        default_config=_config(name, num_envs=8, num_steps=128, max_iterations=100),
    )


def list_tasks() -> list[Task]:
    """The built-in tasks, then example ``gym:`` tasks (any registered Gymnasium id works)."""
    gym_tasks = [_gym_task(GYM_PREFIX + i, d) for i, d in _GYM_EXAMPLES.items()]
    return [*_BUILTINS.values(), *gym_tasks]


def get_task(name: str) -> Task:
    """The task called ``name``; ``gym:<Id>`` for any registered Gymnasium environment."""
    if name in _BUILTINS:
        return _BUILTINS[name]
    if name in _HIDDEN:
        return _HIDDEN[name]
    if name.startswith(GYM_PREFIX):
        return _gym_task(name, _GYM_EXAMPLES.get(name[len(GYM_PREFIX) :]))
    known = [*_BUILTINS, *(GYM_PREFIX + i for i in _GYM_EXAMPLES)]
    by_lower = {k.lower(): k for k in known}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=3, cutoff=0.4)
    hint = f" Did you mean {', '.join(by_lower[c] for c in close)}?" if close else ""
    raise ValueError(
        f"unknown task {name!r}.{hint} Run `distrl list` for every task, or use gym:<Id> for a "
        f"Gymnasium environment."
    )


def default_config(name: str) -> TrainConfig:
    """A fresh default TrainConfig for task ``name`` (with ``task`` set)."""
    return get_task(name).default_config()


def make_env(cfg: TrainConfig, device: torch.device | str) -> VecEnv:
    """Build ``cfg.task``'s VecEnv with ``cfg.env.num_envs`` envs on ``device``."""
    task = get_task(cfg.task)
    return task.make_env(cfg.env.num_envs, torch.device(device), cfg.env.max_episode_steps)
