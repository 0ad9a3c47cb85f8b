"""Gymnasium envs as tasks: the ``Task`` fields (env factory, default config, preflight) of a
``gym:<Id>`` task and of ``register_task(name, gym=...)``, for the task registry
(``envs/registry.py``).

Gymnasium is imported only when one of these is called, and the adapter (``envs/gym.py``) only
when an env is built or a space checked, so looking up a built-in task never pays for them.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import torch

from distrl.config import TrainConfig
from distrl.envs.core import VecEnv
from distrl.envs.tuned import GYM_TUNED, config_factory

GYM_PREFIX = "gym:"


def is_gym_id(name: str) -> bool:
    """Whether ``name`` is a registered Gymnasium id (or an Atari one, whose refusal says what
    to install when ale-py is missing)."""
    import gymnasium

    return name in gymnasium.registry or name.startswith("ALE/")


def id_parts(name: str, env_id: str, time_limit: int | None = None) -> dict[str, Any]:
    """The ``Task`` fields, but its name and description, of task ``name`` stepping the
    registered Gymnasium id ``env_id`` (``time_limit``: as ``make_env_factory`` takes it)."""
    return {
        "gymnasium": True,
        "make_env": make_env_factory(env_id, time_limit),
        "default_config": default_config(name, env_id),
        "preflight": functools.partial(_check_spaces, env_id),
    }


def _check_spaces(env_id: str) -> None:
    from distrl.envs.gym import check_spaces

    check_spaces(env_id)


def make_env_factory(env_id: str, time_limit: int | None = None) -> Callable[..., VecEnv]:
    """The ``make_env`` of Gymnasium id ``env_id`` (``time_limit``: unless the config sets
    one, else the id's own)."""

    def make_env(
        num_envs: int,
        device: torch.device,
        max_episode_steps: int | None = None,
        vectorization: str = "sync",
    ) -> VecEnv:
        from distrl.envs.gym import GymVecEnv

        limit = max_episode_steps if max_episode_steps is not None else time_limit
        mode = None if vectorization == "sync" else vectorization  # None: native where it can
        return GymVecEnv(env_id, num_envs, device, limit, vectorization_mode=mode)

    return make_env


def default_config(name: str, env_id: str) -> Callable[[], TrainConfig]:
    """The defaults of a task stepping Gymnasium id ``env_id``: tuned ones
    (``tuned.GYM_TUNED``), or ``untuned_config``'s."""
    tuned = GYM_TUNED.get(env_id)
    return tuned(name) if tuned else untuned_config(name, env_id)


def untuned_config(
    name: str, env_id: str | None = None, num_envs: int = 8, network: str | None = None
) -> Callable[[], TrainConfig]:
    """``num_envs`` envs x 128 steps, 100 iterations; ``network``, or the one that fits the
    observations of ``env_id`` when given (``gym.default_network``: nature-cnn for images,
    multi-input for Dicts with images, mlp)."""

    def make() -> TrainConfig:
        cfg = config_factory(name, num_envs=num_envs, num_steps=128, max_iterations=100)()
        chosen = network
        if env_id is not None:
            from distrl.envs.gym import default_network

            chosen = default_network(env_id)
        if chosen is None or chosen == cfg.policy.network:
            return cfg
        return dataclasses.replace(cfg, policy=dataclasses.replace(cfg.policy, network=chosen))

    return make


def task_parts(name: str, gym: Any, max_episode_steps: int | None) -> dict[str, Any]:
    """The ``Task`` fields of task ``name`` stepping ``gym`` (``register_task``'s ``gym=``)."""
    import gymnasium

    from distrl.envs.gym import VectorEnvInstance, instance_spec, resolve_env_id

    parts: dict[str, Any] = {"gymnasium": True}
    if isinstance(gym, str):
        env_id = resolve_env_id(gym.removeprefix(GYM_PREFIX))
        return id_parts(name, env_id, max_episode_steps) | {"description": f"Gymnasium {env_id}"}
    if isinstance(gym, gymnasium.vector.VectorEnv):
        if max_episode_steps is not None:
            raise ValueError(
                f"register_task({name!r}): max_episode_steps= cannot change the time limit of "
                f"a VectorEnv instance's envs; wrap them in gymnasium.wrappers.TimeLimit, or pass "
                f"a factory of one env"
            )
        vec = VectorEnvInstance(name, gym)
        return parts | {
            "make_env": vec.make_env,
            "default_config": untuned_config(name, None, vec.num_envs, vec.default_network),
            "check": vec.check,
            "description": f"a {vec.kind} of {vec.num_envs} envs, stepped as it is",
        }
    registration: dict[str, Any]
    if isinstance(gym, gymnasium.Env):
        spec = instance_spec(gym)
        registration = {
            "entry_point": spec.entry_point,
            "kwargs": spec.kwargs,
            "max_episode_steps": max_episode_steps or spec.max_episode_steps,
            "additional_wrappers": spec.additional_wrappers,
            "order_enforce": spec.order_enforce,
            "disable_env_checker": spec.disable_env_checker,
            "reward_threshold": spec.reward_threshold,
            "nondeterministic": spec.nondeterministic,
        }
        what = f"copies of a {spec.id} instance (its env.spec)"
    elif callable(gym):
        registration = {"entry_point": gym, "max_episode_steps": max_episode_steps}
        what = f"registered by {getattr(gym, '__module__', '?')}"
    else:
        raise ValueError(
            f"register_task({name!r}): gym= takes a Gymnasium id (e.g. 'CartPole-v1'), a factory "
            f"of one env, an env made by gymnasium.make, or a gymnasium.vector.VectorEnv; got an "
            f"object of type {type(gym).__name__}"
        )
    from distrl.envs.gym import default_network

    env_id = f"distrl-user/{''.join(c if c.isalnum() or c in '_.' else '_' for c in name)}"
    gymnasium.registry.pop(env_id, None)  # registered before with another env: replaced
    gymnasium.register(env_id, **registration)
    default_network.cache_clear()
    return parts | {
        "make_env": make_env_factory(env_id),
        "default_config": untuned_config(name, env_id),
        "description": what,
    }
