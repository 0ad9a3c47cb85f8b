"""Gymnasium adapter: any registered Gymnasium environment as a distrl ``VecEnv``.

Wraps ``gymnasium.make_vec`` (Gymnasium >= 1.0 vector API). Gymnasium's native vectorized
implementation (the spec's ``vector_entry_point``) is used when it resets in the same step;
otherwise (e.g. CartPole's native vector env only supports next-step autoreset) the environments
run in a ``SyncVectorEnv`` with ``AutoresetMode.SAME_STEP``, which puts the observation that ended
an episode into ``info["final_obs"]`` and the first observation of the next one into ``obs``,
exactly the VecEnv contract; ``--env.vectorization async`` runs them in an ``AsyncVectorEnv``
whose subprocesses ignore Ctrl-C (``async_workers``).
A vector env built by the caller (``GymVecEnv.wrap``, ``VectorEnvInstance``) is stepped as it
is; where it resets on the next step (or never), distrl resets the ended envs at once with
``reset_mask``.
Numpy arrays are converted to torch tensors once per step.

Observations (``ObsSpec``), each one flat row per env:
  Box                 float32 values, flattened (any shape that is not an image)
  image Box           uint8 bytes in (C, H, W) order, ``obs_shape`` (C, H, W), ``obs_dtype``
                      uint8. An image is what Stable-Baselines3's ``is_image_space`` calls one:
                      a uint8 Box with bounds 0 and 255 of 3 dimensions (or 2: one channel,
                      which SB3 does not take). Channels first or last is decided as SB3 does
                      (``is_image_space_channels_first``, ``VecTransposeImage``): channels first
                      when the first dimension is the smallest, else channels last, moved first
  Dict                with an image among its keys: uint8 rows laid out by an ``ObsLayout``
                      (``envs/core.py``): the images' bytes, then each vector key's float32
                      values as their raw bytes; ``--policy.network multi-input`` reads them
                      (SB3's MultiInputPolicy). Without an image: the keys' float32 values side
                      by side, a plain vector row. Vector keys: Box, Discrete and MultiDiscrete
                      (one-hot, as SB3 preprocesses them), MultiBinary. An ``action_mask``
                      key (SB3-contrib's MaskablePPO convention: a 0/1 entry per Discrete
                      action) goes last in a vector row and masks the policy
                      (``ActionSpace.mask_in_obs``); beside images it is refused
Actions: Discrete; MultiDiscrete (1-D ``nvec``) and MultiBinary as ``multi_discrete``; 1-D Box.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import importlib
import math
from typing import Any

import gymnasium
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.envs.registration import EnvSpec, load_env_creator
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

from distrl.envs import async_workers
from distrl.envs.core import ActionSpace, ObsLayout, VecEnv
from distrl.install import pip_install

ATARI_HINT = (
    "install distrl's atari extra (ale-py, the Arcade Learning Environment): "
    f"{pip_install('atari')}; or train Atari with the standard preprocessing through "
    f"EnvPool: distrl train atari-pong (the envpool extra: {pip_install('envpool')})"
)
BOX2D_HINT = (
    "install Gymnasium's box2d extra (it builds box2d-py with swig): pip install swig && "
    "pip install 'gymnasium[box2d]'"
)
MUJOCO_HINT = f"install distrl's mujoco extra: {pip_install('mujoco')}"


def _namespace(env_id: str) -> str | None:
    return env_id.split("/", 1)[0] if "/" in env_id else None


def resolve_env_id(env_id: str) -> str:
    """Validate a Gymnasium id and return it; ``"module:Id"`` imports ``module`` first (which
    registers ``Id``), as ``gymnasium.make`` does; ``ALE/<Game>`` imports ale-py, which registers
    the Atari games, and says which extra to install when it is missing. Unknown ids raise a
    ValueError naming close ids."""
    if ":" in env_id:
        module, env_id = env_id.split(":", 1)
        importlib.import_module(module)
    if env_id in gymnasium.registry:
        return env_id
    if _namespace(env_id) == "ALE":
        try:
            importlib.import_module("ale_py")  # registers ALE/<Game>-v5 with Gymnasium
        except ImportError as e:
            raise ValueError(
                f"gym:{env_id} is an Atari game and ale-py is missing: {ATARI_HINT}"
            ) from e
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


# ---- actions -------------------------------------------------------------------------------
MASK_KEY = "action_mask"
"""The Dict observation key of a legal-action mask (one 0/1 entry per discrete action)."""


def with_mask(env_id: str, action: ActionSpace, width: int) -> ActionSpace:
    """``action`` reading a legal-action mask of ``width`` entries at the end of each row."""
    if not width:
        return action
    if not action.discrete or action.n != width:
        raise ValueError(
            f"gym:{env_id}: its {MASK_KEY!r} has {width} entries; a mask needs Discrete actions "
            f"of as many choices (the action space is {action.kind}"
            f"{f' of {action.n}' if action.discrete else ''})"
        )
    return dataclasses.replace(action, mask_in_obs=True)


def _action_space(env_id: str, space: spaces.Space) -> ActionSpace:
    if isinstance(space, spaces.Discrete):
        return ActionSpace("discrete", n=int(space.n))
    if isinstance(space, spaces.MultiDiscrete) and space.nvec.ndim == 1:
        return ActionSpace("multi_discrete", nvec=tuple(int(n) for n in space.nvec))
    if isinstance(space, spaces.MultiBinary) and np.ndim(space.n) == 0:
        return ActionSpace("multi_discrete", nvec=(2,) * int(space.n))  # type: ignore[arg-type]
    if isinstance(space, spaces.Box) and len(space.shape) == 1:
        low = tuple(float(v) for v in space.low)
        high = tuple(float(v) for v in space.high)
        return ActionSpace("continuous", low=low, high=high)
    raise ValueError(
        f"gym:{env_id} has action space {space}; distrl supports Discrete, MultiDiscrete and "
        f"MultiBinary with 1-D shapes, and 1-D Box actions: wrap the env with a "
        f"gymnasium.ActionWrapper that takes one of these (e.g. a flattened MultiDiscrete or "
        f"Box) and register it (distrl.register_task(name, gym=factory))"
    )


def _action_offset(space: spaces.Space) -> np.ndarray | None:
    """What to add to the policy's 0-based actions: Discrete's and MultiDiscrete's ``start``
    (None: nothing)."""
    if isinstance(space, spaces.Discrete | spaces.MultiDiscrete):
        start = np.asarray(space.start)
        return start if start.any() else None
    return None


# ---- observations --------------------------------------------------------------------------
def is_image(space: spaces.Space) -> bool:
    """SB3's ``is_image_space`` (uint8 Box, bounds 0 and 255, 3 dimensions), 2 dimensions too."""
    return (
        isinstance(space, spaces.Box)
        and space.dtype == np.uint8
        and len(space.shape) in (2, 3)
        and bool(np.all(space.low == 0))
        and bool(np.all(space.high == 255))
    )


def _image_chw(shape: tuple[int, ...]) -> tuple[tuple[int, int, int], bool]:
    """((C, H, W), channels_last) of an image Box's shape (module docstring: SB3's rule)."""
    if len(shape) == 2:
        return (1, shape[0], shape[1]), False
    if int(np.argmin(shape)) == 0:
        return (shape[0], shape[1], shape[2]), False
    return (shape[2], shape[0], shape[1]), True


def _vector_width(env_id: str, key: str, space: spaces.Space) -> int:
    """Float32 entries a Dict key takes as a vector; a ValueError for spaces distrl cannot."""
    if isinstance(space, spaces.Box):
        return int(math.prod(space.shape))
    if isinstance(space, spaces.Discrete):
        return int(space.n)
    if isinstance(space, spaces.MultiDiscrete):
        return int(space.nvec.sum())
    if isinstance(space, spaces.MultiBinary):
        return int(np.prod(space.n))
    raise ValueError(
        f"gym:{env_id} has observation key {key!r} of space {space}; distrl takes Dict keys that "
        f"are Box (images or vectors), Discrete, MultiDiscrete or MultiBinary: flatten that key "
        f"(e.g. gymnasium.wrappers.FlattenObservation on a wrapper of it) and register the env"
    )


def _vector_values(space: spaces.Space, x: np.ndarray, n: int) -> np.ndarray:
    """A batch [n, ...] of one vector key as float32 [n, width] (one-hot for Discrete)."""
    if isinstance(space, spaces.Discrete):
        idx = np.asarray(x).reshape(n) - int(space.start)
        return np.eye(int(space.n), dtype=np.float32)[idx]
    if isinstance(space, spaces.MultiDiscrete):
        idx = np.asarray(x).reshape(n, -1) - np.asarray(space.start).reshape(1, -1)
        nvec = space.nvec.reshape(-1)
        return np.concatenate(
            [np.eye(int(k), dtype=np.float32)[idx[:, j]] for j, k in enumerate(nvec)], axis=1
        )
    return np.asarray(x, dtype=np.float32).reshape(n, -1)


class ObsSpec:
    """How a Gymnasium observation space becomes distrl rows (module docstring):
    ``obs_shape``, ``obs_dtype``, ``obs_dim`` and ``rows(batch, n)`` -> numpy [n, obs_dim]."""

    def __init__(self, env_id: str, space: spaces.Space):
        self.env_id, self.space = env_id, space
        self.mask_width = 0
        """Entries of the legal-action mask at the end of each row (a Dict's ``action_mask``,
        SB3-contrib's MaskablePPO convention); 0: none."""
        self.obs_dtype = torch.float32
        self.kind = "vector"
        if isinstance(space, spaces.Dict):
            parts: list[tuple[str, str, tuple[int, ...]]] = []
            for key, sub in space.spaces.items():
                if is_image(sub):
                    parts.append((str(key), "image", _image_chw(sub.shape or ())[0]))
                else:
                    parts.append((str(key), "vector", (_vector_width(env_id, key, sub),)))
            if not parts:
                raise ValueError(f"gym:{env_id} has an empty Dict observation space")
            self.mask_width = 0
            if MASK_KEY in space.spaces:  # the legal-action mask last (ActionSpace.mask_in_obs)
                parts = [p for p in parts if p[0] != MASK_KEY] + [
                    p for p in parts if p[0] == MASK_KEY
                ]
                self.mask_width = parts[-1][2][0]
            if any(kind == "image" for _, kind, _ in parts):
                if self.mask_width:
                    raise ValueError(
                        f"gym:{env_id}: an {MASK_KEY!r} beside image keys is not read yet (the "
                        f"mask must be float values at the end of a vector row); an env of "
                        f"vector keys and {MASK_KEY!r} is"
                    )
                self.kind, self.obs_dtype = "dict", torch.uint8
                self.layout = ObsLayout.of(parts)
                self.obs_shape: tuple[int, ...] = self.layout
            else:  # vectors only: one float32 row, the keys side by side
                self.kind = "dict-vector"
                self.keys = [key for key, _, _ in parts]
                self.obs_shape = (sum(shape[0] for _, _, shape in parts),)
        elif is_image(space):
            self.kind, self.obs_dtype = "image", torch.uint8
            self.obs_shape, self.channels_last = _image_chw(space.shape or ())
        elif isinstance(space, spaces.Box):
            self.obs_shape = (int(math.prod(space.shape)),)
        else:
            raise ValueError(
                f"gym:{env_id} has observation space {space}; distrl needs a Box observation "
                f"(vectors or uint8 images) or a Dict of Box, Discrete, MultiDiscrete and "
                f"MultiBinary keys (wrap the env with e.g. gymnasium.wrappers.FlattenObservation "
                f"and register it: distrl.register_task(name, gym=factory))"
            )
        self.obs_dim = int(math.prod(self.obs_shape))

    @property
    def default_network(self) -> str:
        """The built-in network for these observations: nature-cnn for images of at least
        36x36, multi-input for smaller images and for Dicts with images, else mlp."""
        if self.kind == "image":
            _, h, w = self.obs_shape
            return "nature-cnn" if min(h, w) >= 36 else "multi-input"
        return "multi-input" if self.kind == "dict" else "mlp"

    def _image(self, x: np.ndarray, n: int, channels_last: bool) -> np.ndarray:
        x = np.asarray(x, dtype=np.uint8)
        if channels_last:
            x = x.transpose(0, 3, 1, 2)
        return np.ascontiguousarray(x).reshape(n, -1)

    def rows(self, obs: Any, n: int) -> np.ndarray:
        """A batch of ``n`` Gymnasium observations as rows [n, obs_dim]."""
        if self.kind == "vector":
            return np.asarray(obs).reshape(n, self.obs_dim)
        if self.kind == "image":
            return self._image(obs, n, self.channels_last)
        subs = self.space.spaces  # type: ignore[attr-defined]
        if self.kind == "dict-vector":
            return np.concatenate([_vector_values(subs[k], obs[k], n) for k in self.keys], axis=1)
        out = np.zeros((n, self.obs_dim), dtype=np.uint8)
        for f in self.layout.fields:
            sub = subs[f.key]
            if f.kind == "image":
                x = self._image(obs[f.key], n, _image_chw(sub.shape or ())[1])
            else:
                values = _vector_values(sub, obs[f.key], n)
                if not np.isfinite(values).all():  # bytes are never checked for NaN downstream
                    raise ValueError(
                        f"gym:{self.env_id} returned a non-finite value in observation key "
                        f"{f.key!r}"
                    )
                x = values.view(np.uint8)  # float32 bytes, little-endian
            out[:, f.offset : f.offset + f.nbytes] = x
        return out


# ---- missing dependencies ------------------------------------------------------------------
def _missing_dependency(env_id: str, error: Exception) -> str:
    """The refusal of an env whose optional dependency is missing, naming what to install
    (found from the env's entry point: Gymnasium's box2d and mujoco envs, ale-py's games)."""
    entry = str(gymnasium.spec(env_id).entry_point) if env_id in gymnasium.registry else ""
    text = f"{entry} {error}".lower()
    if "box2d" in text:
        hint = BOX2D_HINT
    elif "mujoco" in text:
        hint = MUJOCO_HINT
    elif "ale_py" in text or "ale-py" in text or _namespace(env_id) == "ALE":
        hint = ATARI_HINT
    else:
        hint = "install the package it names"
    return f"gym:{env_id} needs an optional dependency that is not installed ({error}); {hint}"


def _make_one(env_id: str) -> gymnasium.Env:
    try:
        return gymnasium.make(env_id)
    except (gymnasium.error.DependencyNotInstalled, ImportError) as e:
        raise ValueError(_missing_dependency(env_id, e)) from e


def check_spaces(env_id: str) -> None:
    """Refuse ``gym:<env_id>`` before training when ``GymVecEnv`` cannot step it: one env is
    built and closed, and its observation and action spaces must be ones the module docstring
    lists. A missing optional dependency (MuJoCo, Box2D, ale-py) is a ValueError naming it."""
    env_id = resolve_env_id(env_id)
    env = _make_one(env_id)
    try:
        ObsSpec(env_id, env.observation_space)
        _action_space(env_id, env.action_space)
    finally:
        env.close()


@functools.cache
def default_network(env_id: str) -> str:
    """The network a ``gym:<env_id>`` task trains by default (``ObsSpec.default_network``);
    mlp when the env cannot be built here (the task's preflight then says why)."""
    try:
        env = gymnasium.make(resolve_env_id(env_id))
    except Exception:
        return "mlp"
    try:
        return ObsSpec(env_id, env.observation_space).default_network
    except ValueError:
        return "mlp"
    finally:
        env.close()


# Gymnasium 1.1 added reset_mask: Sync- and AsyncVectorEnv reset some envs alone
_HAS_RESET_MASK = tuple(int(v) for v in gymnasium.__version__.split(".")[:2]) >= (1, 1)


def _mask_reset_problem(vector_env: gymnasium.vector.VectorEnv) -> str | None:
    """Why distrl cannot reset the ended envs of ``vector_env`` alone (``reset_mask``), the
    same-step reset it needs from a vector env that resets otherwise; None: it can."""
    unwrapped = vector_env.unwrapped
    if not _HAS_RESET_MASK:
        return f"Gymnasium {gymnasium.__version__} cannot reset one env alone (1.1 can)"
    if not isinstance(unwrapped, SyncVectorEnv | AsyncVectorEnv):
        return "it is no SyncVectorEnv or AsyncVectorEnv, which can reset one env alone"
    next_step = unwrapped.metadata.get("autoreset_mode") == AutoresetMode.NEXT_STEP
    if isinstance(unwrapped, AsyncVectorEnv) and not unwrapped.shared_memory and next_step:
        # its workers clear a pending autoreset on reset only with shared memory
        return "an AsyncVectorEnv without shared_memory cannot reset one env alone"
    return None


class GymVecEnv(VecEnv):
    """``num_envs`` copies of Gymnasium env ``env_id``, returning torch tensors on ``device``.

    ``seed`` seeds the first ``reset()`` when that call passes no seed of its own (Gymnasium seeds
    sub-env i with seed + i). ``max_episode_steps`` overrides the registered time limit.
    ``render_mode`` is passed to every sub-env (``vector_env.render()`` then returns one frame
    each). ``vectorization_mode``: None (Gymnasium's native vector env where it resets in the
    same step, else ``SyncVectorEnv``), ``"sync"`` or ``"async"`` (``AsyncVectorEnv``, one
    subprocess per env, stopped by ``close()``). ``GymVecEnv.wrap`` steps a vector env built
    elsewhere. Observations become rows as the module docstring says. State cannot be saved: a
    resumed run starts fresh episodes.
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
        vector_kwargs: dict[str, Any] = {}
        if vectorization_mode in ("sync", "async"):
            vector_kwargs["autoreset_mode"] = AutoresetMode.SAME_STEP
        starting: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
        if vectorization_mode == "async":  # Ctrl-C is the training process's to act on
            vector_kwargs["worker"] = async_workers.worker
            starting = async_workers.starting()
        try:
            with starting:
                vector_env = gymnasium.make_vec(
                    env_id,
                    num_envs=num_envs,
                    vectorization_mode=vectorization_mode,
                    vector_kwargs=vector_kwargs,
                    **kwargs,
                )
        except (gymnasium.error.DependencyNotInstalled, ImportError) as e:
            raise ImportError(_missing_dependency(env_id, e)) from e
        spec_limit = gymnasium.spec(env_id).max_episode_steps
        limit = max_episode_steps if max_episode_steps is not None else spec_limit
        self._adopt(vector_env, env_id, device, limit, seed, owned=True)

    @classmethod
    def wrap(
        cls,
        vector_env: gymnasium.vector.VectorEnv,
        device: torch.device | str = "cpu",
        refusal: str | None = None,
        owned: bool = False,
    ) -> GymVecEnv:
        """``vector_env`` stepped as it is; ``close()`` leaves it open (its owner closes it)
        unless ``owned``. With ``refusal``, only its spaces are read: ``reset`` and ``step``
        raise ValueError with that text."""
        self = cls.__new__(cls)
        spec = getattr(vector_env, "spec", None)
        label = spec.id if spec is not None else type(vector_env.unwrapped).__name__
        limit = spec.max_episode_steps if spec is not None else None
        self._adopt(vector_env, label, device, limit, None, owned)
        self._refusal = refusal
        return self

    def _adopt(
        self,
        vector_env: gymnasium.vector.VectorEnv,
        env_id: str,
        device: torch.device | str,
        max_episode_steps: int | None,
        seed: int | None,
        owned: bool,
    ) -> None:
        self.vector_env, self._owned = vector_env, owned
        self._refusal: str | None = None
        mode = vector_env.metadata.get("autoreset_mode")
        # any other autoreset mode: distrl resets the ended envs itself (reset_mask), which
        # Gymnasium's Sync- and AsyncVectorEnv do in any mode; the same episodes as SAME_STEP
        self._reset_ended = mode != AutoresetMode.SAME_STEP
        problem = _mask_reset_problem(vector_env) if self._reset_ended else None
        if problem is not None:
            self.close()
            raise ValueError(
                f"gym:{env_id}: {type(vector_env.unwrapped).__name__} resets with {mode}, and "
                f"{problem}; distrl needs AutoresetMode.SAME_STEP: build it with "
                f"autoreset_mode=AutoresetMode.SAME_STEP, or as gymnasium.make_vec({env_id!r}, "
                f"n, vectorization_mode='sync'), or pass the env id or a factory of one env"
            )
        try:
            self.obs_spec = ObsSpec(env_id, vector_env.single_observation_space)
            self.action_space = _action_space(env_id, vector_env.single_action_space)
            self.action_space = with_mask(env_id, self.action_space, self.obs_spec.mask_width)
        except ValueError:
            self.close()
            raise
        self.env_id = env_id
        self.num_envs = int(vector_env.num_envs)
        self.device = torch.device(device)
        self.obs_dim, self.obs_dtype = self.obs_spec.obs_dim, self.obs_spec.obs_dtype
        single_action_space = vector_env.single_action_space
        self._np_action_dtype = single_action_space.dtype
        # Discrete(n, start=s) takes actions s..s+n-1 (MultiDiscrete likewise per component);
        # the policy emits 0..n-1.
        self._action_offset = _action_offset(single_action_space)
        # None when the env has no time limit of its own.
        self.max_episode_steps = max_episode_steps
        self._seed = seed
        self.closed = False

    @property
    def obs_shape(self) -> tuple[int, ...]:
        return self.obs_spec.obs_shape

    def _to_torch(self, obs: Any) -> torch.Tensor:
        t = torch.as_tensor(self.obs_spec.rows(obs, self.num_envs), dtype=self.obs_dtype)
        return t.to(self.device)

    def reset(self, seed: int | None = None) -> torch.Tensor:
        if self._refusal is not None:
            raise ValueError(self._refusal)
        if seed is None:
            seed, self._seed = self._seed, None  # the constructor's seed applies once
        obs, _ = self.vector_env.reset(seed=seed)
        return self._to_torch(obs)

    def _final_obs(self, obs: Any, info: dict[str, Any]) -> Any:
        """``obs`` with the rows of ended episodes replaced by ``info["final_obs"]``'s (an object
        array, set where ``info["_final_obs"]``), in the vector env's own format."""
        ended = np.flatnonzero(info["_final_obs"])
        if isinstance(obs, dict):
            final = {k: v.copy() for k, v in obs.items()}
            for i in ended:
                for k in final:
                    final[k][i] = info["final_obs"][i][k]
            return final
        final = obs.copy()
        for i in ended:
            final[i] = info["final_obs"][i]
        return final

    def step(
        self, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        if self._refusal is not None:
            raise ValueError(self._refusal)
        np_actions = actions.detach().cpu().numpy().astype(self._np_action_dtype, copy=False)
        if self._action_offset is not None:
            np_actions = np_actions + self._action_offset
        obs, reward, terminated, truncated, info = self.vector_env.step(np_actions)
        obs_t = self._to_torch(obs)
        ended = np.logical_or(terminated, truncated)
        if self._reset_ended and ended.any():
            # the ended envs' last observations are in obs: keep them, reset those envs alone
            final_t = obs_t.clone()
            obs_t = self._to_torch(self.vector_env.reset(options={"reset_mask": ended})[0])
        elif "final_obs" in info:  # SAME_STEP autoreset: the ended episodes' last observations
            final_t = self._to_torch(self._final_obs(obs, info))
        else:
            final_t = obs_t
        return (
            obs_t,
            torch.as_tensor(reward, dtype=torch.float32).to(self.device),
            torch.as_tensor(terminated, dtype=torch.bool).to(self.device),
            torch.as_tensor(truncated, dtype=torch.bool).to(self.device),
            {"final_obs": final_t},
        )

    def close(self) -> None:
        """Close the vector env (an AsyncVectorEnv's subprocesses end) unless it was wrapped."""
        if self._owned:
            self.vector_env.close()
        self.closed = True


# ---- env objects: a Gymnasium env instance, a vector env instance --------------------------
def instance_spec(env: gymnasium.Env) -> EnvSpec:
    """The spec ``gymnasium.make`` builds copies of ``env`` from (its ``render_mode`` left out:
    distrl renders by itself); a ValueError naming what to pass instead when there is none."""
    spec = env.spec
    if spec is None:
        raise ValueError(
            f"distrl steps num_envs copies of an env, and this {type(env).__name__} instance has "
            f"no spec to make them from (env.spec is None: gymnasium.make did not build it); "
            f"pass a factory of one env instead, e.g. distrl.train(lambda: "
            f"{type(env.unwrapped).__name__}(...)), or the Gymnasium id it is registered under"
        )
    unrecorded = [w.name for w in spec.additional_wrappers if w.kwargs is None]
    if unrecorded:
        raise ValueError(
            f"distrl steps num_envs copies of an env, made by gymnasium.make(env.spec), and this "
            f"{spec.id} instance is wrapped in {', '.join(unrecorded)}, which does not record its "
            f"arguments (gymnasium.utils.RecordConstructorArgs) for env.spec to rebuild it; pass "
            f"a factory of one env instead, e.g. distrl.train(lambda: "
            f"{unrecorded[-1]}(gymnasium.make({spec.id!r})))"
        )
    kwargs = {k: v for k, v in spec.kwargs.items() if k != "render_mode"}
    return dataclasses.replace(spec, kwargs=kwargs)


def registered_id(spec: EnvSpec) -> str | None:
    """``spec.id`` when ``spec`` is the spec registered under it (``gym:<Id>`` then builds the
    same envs), else None."""
    return spec.id if gymnasium.registry.get(spec.id) == spec else None


class VectorEnvInstance:
    """A ``gymnasium.vector.VectorEnv`` built by the caller, as the envs of task ``name``
    (``register_task(name, gym=vector_env)``, ``distrl.train(vector_env)``).

    Training steps the instance itself, as it is: its ``num_envs``, seeded by distrl's first
    reset, left open at the end (its owner closes it). Any other env of the task (evaluation,
    ``distrl.play``) is a ``SyncVectorEnv`` of the instance's ``env_fns`` when it is a Sync- or
    AsyncVectorEnv without vector wrappers; else it only gives its spaces (loading a policy),
    and stepping it is refused. ``check`` refuses the options the instance cannot honour."""

    def __init__(self, name: str, vector_env: gymnasium.vector.VectorEnv) -> None:
        self.name, self.vector_env = name, vector_env
        self.num_envs = int(vector_env.num_envs)
        self.kind = type(vector_env).__name__
        bare = vector_env.unwrapped is vector_env
        self.env_fns = getattr(vector_env, "env_fns", None) if bare else None
        self.default_network = GymVecEnv.wrap(vector_env).obs_spec.default_network  # checked
        self._live: GymVecEnv | None = None

    def make_env(
        self,
        num_envs: int,
        device: torch.device,
        max_episode_steps: int | None = None,
        vectorization: str = "sync",
    ) -> VecEnv:
        if num_envs == self.num_envs and (self._live is None or self._live.closed):
            self._live = GymVecEnv.wrap(self.vector_env, device)
            return self._live
        if self.env_fns is not None:
            fns = [self.env_fns[i % self.num_envs] for i in range(num_envs)]
            copies = SyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP)
            return GymVecEnv.wrap(copies, device, owned=True)
        return GymVecEnv.wrap(self.vector_env, device, refusal=self._copies_refused())

    def _copies_refused(self) -> str:
        return (
            f"task {self.name!r} steps a {self.kind} instance, and distrl cannot copy it "
            f"(vector wrappers or no env_fns) for envs apart from it (evaluation, distrl.play); "
            f"pass a bare SyncVectorEnv or AsyncVectorEnv, or a factory of one env"
        )

    def check(self, cfg: Any) -> None:
        """Refuse what ``cfg`` (a TrainConfig) asks of the instance and it cannot do."""
        e, problems = cfg.env, []
        if e.num_envs != self.num_envs:
            problems.append(
                f"--env.num-envs {e.num_envs}: task {self.name!r} steps a {self.kind} instance of "
                f"{self.num_envs} envs, as it is; leave --env.num-envs at {self.num_envs}, or "
                f"build the vector env with {e.num_envs}"
            )
        if e.vectorization != "sync":
            problems.append(
                f"--env.vectorization {e.vectorization}: task {self.name!r} steps a {self.kind} "
                f"instance as it was built; build a gymnasium.vector.AsyncVectorEnv yourself, or "
                f"pass a factory of one env with --env.vectorization {e.vectorization}"
            )
        if e.max_episode_steps is not None:
            problems.append(
                f"--env.max-episode-steps {e.max_episode_steps}: the envs of the {self.kind} "
                f"instance keep their own time limit; wrap them in gymnasium.wrappers.TimeLimit, "
                f"or pass a factory of one env"
            )
        if cfg.eval.interval > 0 and self.env_fns is None:
            problems.append(f"--eval.interval {cfg.eval.interval}: {self._copies_refused()}")
        # (a rank under torchrun always has nproc 1: the launcher strips --nproc)
        if cfg.nproc > 1:
            problems.append(
                f"nproc={cfg.nproc} starts fresh processes, and a {self.kind} instance cannot "
                f"travel to them; pass a factory of one env (distrl.train(lambda: "
                f"gymnasium.make(...)) or register_task(name, gym=factory)) and run the script "
                f"on every rank: torchrun --nproc-per-node {cfg.nproc} script.py"
            )
        if problems:
            raise ValueError("; ".join(problems))
