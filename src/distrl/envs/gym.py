"""Gymnasium adapter: any registered Gymnasium environment as a distrl ``VecEnv``.

Wraps ``gymnasium.make_vec`` (Gymnasium >= 1.0 vector API). Gymnasium's native vectorized
implementation (the spec's ``vector_entry_point``) is used when it resets in the same step;
otherwise (e.g. CartPole's native vector env only supports next-step autoreset) the environments
run in a ``SyncVectorEnv`` with ``AutoresetMode.SAME_STEP``, which puts the observation that ended
an episode into ``info["final_obs"]`` and the first observation of the next one into ``obs``,
exactly the VecEnv contract. Numpy arrays are converted to torch tensors once per step.
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any

import gymnasium
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.envs.registration import load_env_creator
from gymnasium.vector import AutoresetMode

from distrl.envs.core import ActionSpace, VecEnv


def resolve_env_id(env_id: str) -> str:
    """Validate a Gymnasium id and return it; ``"module:Id"`` imports ``module`` first (which
    registers ``Id``), as ``gymnasium.make`` does. Unknown ids raise a ValueError naming close ids.
    """
    if ":" in env_id:
        module, env_id = env_id.split(":", 1)
        importlib.import_module(module)
    if env_id in gymnasium.registry:
        return env_id
    close = difflib.get_close_matches(env_id, list(gymnasium.registry), n=5, cutoff=0.5)
    hint = f" Did you mean {', '.join('gym:' + c for c in close)}?" if close else ""
    raise ValueError(
        f"unknown Gymnasium id {env_id!r}.{hint} Registered ids are listed by "
        f"`python -c 'import gymnasium; gymnasium.pprint_registry()'`."
    )


def _native_resets_same_step(env_id: str) -> bool:
    """Whether ``env_id`` has a native vector env whose autoreset mode is SAME_STEP."""
    entry_point = gymnasium.spec(env_id).vector_entry_point
    if entry_point is None:
        return False
    creator = entry_point if callable(entry_point) else load_env_creator(entry_point)
    metadata = getattr(creator, "metadata", {}) or {}
    return metadata.get("autoreset_mode") == AutoresetMode.SAME_STEP


def _action_space(env_id: str, space: spaces.Space) -> ActionSpace:
    if isinstance(space, spaces.Discrete):
        return ActionSpace("discrete", n=int(space.n))
    if isinstance(space, spaces.Box) and len(space.shape) == 1:
        low = tuple(float(v) for v in space.low)
        high = tuple(float(v) for v in space.high)
        return ActionSpace("continuous", low=low, high=high)
    raise ValueError(
        f"gym:{env_id} has action space {space}; distrl supports Discrete and 1-D Box actions"
    )


def _box_observation(env_id: str, space: spaces.Space) -> spaces.Box:
    """``space`` if it is a Box (any shape: it is flattened); otherwise a ValueError."""
    if not isinstance(space, spaces.Box):
        raise ValueError(
            f"gym:{env_id} has observation space {space}; distrl needs a Box observation "
            f"(wrap the env with e.g. gymnasium.wrappers.FlattenObservation and register it)"
        )
    return space


def _missing_dependency(env_id: str, error: Exception) -> str:
    return (
        f"gym:{env_id} needs an optional dependency ({error}); for MuJoCo environments "
        f"install distrl's mujoco extra: pip install 'distrl[mujoco]'"
    )


def check_spaces(env_id: str) -> None:
    """Refuse ``gym:<env_id>`` before training when ``GymVecEnv`` cannot step it: one env is
    built and closed, and its observation space must be a Box and its action space Discrete or
    a 1-D Box. A missing optional dependency (MuJoCo, Box2D) is a ValueError naming it too."""
    env_id = resolve_env_id(env_id)
    try:
        env = gymnasium.make(env_id)
    except gymnasium.error.DependencyNotInstalled as e:
        raise ValueError(_missing_dependency(env_id, e)) from e
    try:
        _box_observation(env_id, env.observation_space)
        _action_space(env_id, env.action_space)
    finally:
        env.close()


class GymVecEnv(VecEnv):
    """``num_envs`` copies of Gymnasium env ``env_id``, returning torch tensors on ``device``.

    ``seed`` seeds the first ``reset()`` when that call passes no seed of its own (Gymnasium seeds
    sub-env i with seed + i). ``max_episode_steps`` overrides the registered time limit.
    ``render_mode`` is passed to every sub-env (``vector_env.render()`` then returns one frame
    each); it runs them in a ``SyncVectorEnv`` unless ``vectorization_mode`` says otherwise.
    Non-flat Box observations are flattened to [N, obs_dim]. State cannot be saved: a resumed run
    starts fresh episodes.
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        device: torch.device | str = "cpu",
        max_episode_steps: int | None = None,
        seed: int | None = None,
        vectorization_mode: str | None = None,
        render_mode: str | None = None,
    ) -> None:
        env_id = resolve_env_id(env_id)
        if vectorization_mode is None:
            native = render_mode is None and _native_resets_same_step(env_id)
            vectorization_mode = "vector_entry_point" if native else "sync"
        kwargs: dict[str, Any] = {}
        if max_episode_steps is not None:
            kwargs["max_episode_steps"] = max_episode_steps
        if render_mode is not None:
            kwargs["render_mode"] = render_mode
        vector_kwargs = {}
        if vectorization_mode in ("sync", "async"):
            vector_kwargs["autoreset_mode"] = AutoresetMode.SAME_STEP
        try:
            self.vector_env = gymnasium.make_vec(
                env_id,
                num_envs=num_envs,
                vectorization_mode=vectorization_mode,
                vector_kwargs=vector_kwargs,
                **kwargs,
            )
        except gymnasium.error.DependencyNotInstalled as e:
            raise ImportError(_missing_dependency(env_id, e)) from e
        mode = self.vector_env.metadata.get("autoreset_mode")
        if mode != AutoresetMode.SAME_STEP:
            self.vector_env.close()
            raise ValueError(
                f"gym:{env_id} with vectorization_mode={vectorization_mode!r} resets with {mode}; "
                f"distrl needs AutoresetMode.SAME_STEP (use vectorization_mode='sync')"
            )

        try:
            obs_space = _box_observation(env_id, self.vector_env.single_observation_space)
        except ValueError:
            self.vector_env.close()
            raise
        self.env_id = env_id
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.obs_dim = int(np.prod(obs_space.shape))
        self.action_space = _action_space(env_id, self.vector_env.single_action_space)
        single_action_space = self.vector_env.single_action_space
        self._np_action_dtype = single_action_space.dtype
        # Discrete(n, start=s) takes actions s..s+n-1; the policy emits 0..n-1.
        self._action_offset = (
            int(single_action_space.start)
            if isinstance(single_action_space, spaces.Discrete)
            else 0
        )
        spec_limit = gymnasium.spec(env_id).max_episode_steps
        # None when the env has no time limit of its own.
        self.max_episode_steps = max_episode_steps if max_episode_steps is not None else spec_limit
        self._seed = seed

    def _to_torch(self, obs: np.ndarray) -> torch.Tensor:
        t = torch.as_tensor(obs.reshape(self.num_envs, self.obs_dim), dtype=torch.float32)
        return t.to(self.device)

    def reset(self, seed: int | None = None) -> torch.Tensor:
        if seed is None:
            seed, self._seed = self._seed, None  # the constructor's seed applies once
        obs, _ = self.vector_env.reset(seed=seed)
        return self._to_torch(obs)

    def step(
        self, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        np_actions = actions.detach().cpu().numpy().astype(self._np_action_dtype, copy=False)
        if self._action_offset:
            np_actions = np_actions + self._action_offset
        obs, reward, terminated, truncated, info = self.vector_env.step(np_actions)
        final_obs = obs
        if "final_obs" in info:
            # SAME_STEP autoreset: info["final_obs"] is an object array, set where "_final_obs".
            final_obs = obs.copy()
            for i in np.flatnonzero(info["_final_obs"]):
                final_obs[i] = info["final_obs"][i]
        obs_t = self._to_torch(obs)
        final_t = obs_t if final_obs is obs else self._to_torch(final_obs)
        return (
            obs_t,
            torch.as_tensor(reward, dtype=torch.float32).to(self.device),
            torch.as_tensor(terminated, dtype=torch.bool).to(self.device),
            torch.as_tensor(truncated, dtype=torch.bool).to(self.device),
            {"final_obs": final_t},
        )

    def close(self) -> None:
        self.vector_env.close()
