"""The VecEnv contract: N environments stepped as one batch of torch tensors on one device.

Shapes (N = ``num_envs``):
  reset(seed)    -> obs            [N, obs_dim] float32 (``obs_dtype``: uint8 for images)
  step(actions)  -> obs            [N, obs_dim] float32
                    reward         [N]          float32
                    terminated     [N]          bool   (MDP ended: do not bootstrap)
                    truncated      [N]          bool   (time limit: bootstrap from final_obs)
                    info           dict with at least "final_obs" [N, obs_dim]
  actions: discrete  -> [N] int64 ;  multi_discrete -> [N, K] int64 ;
           continuous -> [N, act_dim] float32 (already clipped)

An observation row is always flat: ``obs_dim`` = prod(``obs_shape``) entries in ``obs_shape``'s
order. Vector envs have ``obs_shape`` (obs_dim,) and float32 rows; image envs give ``obs_shape``
(C, H, W), channels first, and ``obs_dtype`` uint8: rows stay uint8 in rollout storage and on the
wire, and the policy's network views them as images and scales them (``policy/encoders.py``).
Observations of several parts (a Gymnasium ``Dict`` of images and vectors) are one uint8 row too:
``obs_shape`` is then an ``ObsLayout``, the 1-tuple (row bytes,) that also says where each part
lies in the row (images as bytes, vectors as the raw bytes of their float32 values).

Optional ``info`` entries for episode statistics: ``info["score"]`` [N] float32, the reward to
count in episode returns when the training reward is not the game's (Atari: clipped rewards,
the raw score here), and ``info["episode_end"]`` [N] bool, where a whole episode ended when an
env signals ``terminated`` more often than that (Atari's episodic life: a lost life terminates
for the value targets, the game goes on). Without them returns are summed from ``reward`` and an
episode ends where ``terminated | truncated``.

Done envs (terminated | truncated) reset inside the same ``step``: the returned ``obs`` row is the
first observation of the next episode, and ``info["final_obs"]`` holds the observation that ended
the episode (for rows that are not done it equals ``obs``). Truncated episodes must bootstrap from
V(final_obs), never from the reset state.

Envs never import the distributed package, never log and never touch files.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class ActionSpace:
    """What the policy emits: ``n`` for discrete; ``nvec`` (the size of each of K independent
    choices, Gymnasium's MultiDiscrete) for multi_discrete; ``low``/``high`` ([act_dim]) for
    continuous."""

    kind: str  # "discrete" | "multi_discrete" | "continuous"
    n: int = 0
    low: tuple[float, ...] = ()
    high: tuple[float, ...] = ()
    nvec: tuple[int, ...] = ()
    mask_in_obs: bool = False
    """Discrete only: the last ``n`` entries of each observation row are the legal-action mask
    (1 legal, 0 not); the policy gives an illegal action no probability."""

    @property
    def discrete(self) -> bool:
        """One categorical choice (``n``); see ``categorical`` for integer actions of any kind."""
        return self.kind == "discrete"

    @property
    def categorical(self) -> bool:
        """Integer actions drawn from logits: discrete or multi_discrete."""
        return self.kind in ("discrete", "multi_discrete")

    @property
    def dim(self) -> int:
        """Number of policy outputs: logits for discrete (all K choices' for multi_discrete,
        side by side), means for continuous."""
        if self.kind == "multi_discrete":
            return sum(self.nvec)
        return self.n if self.discrete else len(self.low)

    @property
    def shape(self) -> tuple[int, ...]:
        """One env's action: () discrete, (K,) multi_discrete, (act_dim,) continuous."""
        if self.discrete:
            return ()
        return (len(self.nvec),) if self.kind == "multi_discrete" else (len(self.low),)

    @property
    def sizes(self) -> tuple[int, ...]:
        """The number of values of each integer component ((n,) or ``nvec``; () continuous)."""
        if self.discrete:
            return (self.n,)
        return self.nvec


@dataclass(frozen=True)
class ObsField:
    """One part of an ``ObsLayout`` row: ``kind`` "image" (uint8 bytes in (C, H, W) order,
    ``shape`` (C, H, W)) or "vector" (float32 values as their raw little-endian bytes, ``shape``
    (n,)), at bytes [offset, offset + nbytes) of the row."""

    key: str
    kind: str
    shape: tuple[int, ...]
    offset: int
    nbytes: int


class ObsLayout(tuple):
    """The ``obs_shape`` of rows that hold several parts (module docstring): equal to the
    1-tuple (row bytes,), so it is a shape like any other, and ``fields`` say where each part
    lies. Images come first, then the vectors, each at an offset that is a multiple of 4 (so a
    vector's bytes can be viewed as float32), the row padded to a multiple of 4."""

    fields: tuple[ObsField, ...]

    def __new__(cls, fields: tuple[ObsField, ...]) -> ObsLayout:
        end = max((f.offset + f.nbytes for f in fields), default=0)
        self = super().__new__(cls, ((end + 3) // 4 * 4,))
        self.fields = tuple(fields)
        return self

    def __getnewargs__(self) -> tuple[tuple[ObsField, ...]]:
        return (self.fields,)

    @classmethod
    def of(cls, parts: list[tuple[str, str, tuple[int, ...]]]) -> ObsLayout:
        """The layout of ``parts`` (key, kind, shape), images first, each kind in the given
        order."""
        fields, offset = [], 0
        for kind in ("image", "vector"):
            for key, k, shape in parts:
                if k != kind:
                    continue
                offset = (offset + 3) // 4 * 4
                nbytes = math.prod(shape) * (1 if kind == "image" else 4)
                fields.append(ObsField(key, kind, tuple(shape), offset, nbytes))
                offset += nbytes
        return cls(tuple(fields))

    @property
    def nbytes(self) -> int:
        return self[0]

    def __repr__(self) -> str:
        parts = ", ".join(f"{f.key}: {f.kind} {f.shape}" for f in self.fields)
        return f"ObsLayout({self[0]} bytes; {parts})"


class VecEnv(ABC):
    """A batch of ``num_envs`` environments living on ``device``."""

    num_envs: int
    obs_dim: int
    action_space: ActionSpace
    device: torch.device
    max_episode_steps: int | None
    obs_dtype: torch.dtype = torch.float32
    """Element type of the observation rows: float32, or uint8 for images (see the module doc)."""

    @property
    def obs_shape(self) -> tuple[int, ...]:
        """One observation's shape, whose flattening is the row (images: (C, H, W)); subclasses
        with images override it (a class attribute will do)."""
        return (self.obs_dim,)

    """Steps after which an episode is truncated; ``None``: the env has no time limit of its own
    (a Gymnasium env registered without one). The built-in and episodic envs always have one."""

    @abstractmethod
    def reset(self, seed: int | None = None) -> torch.Tensor:
        """Reset every env; ``seed`` makes the batch reproducible. Returns obs [N, obs_dim]."""

    @abstractmethod
    def step(
        self, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        """Advance every env one step; see the module docstring for shapes and reset semantics."""

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue bit-for-bit after a resume (state tensors, RNG)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:  # noqa: B027 (optional hook)
        """Inverse of ``state_dict``. Envs that cannot restore state leave this a no-op."""

    def close(self) -> None:  # noqa: B027 (optional hook)
        """Release resources (subprocesses, renderers)."""


def check_saved_shape(env: VecEnv, saved: torch.Tensor, expected: tuple[int, ...]) -> None:
    """Refuse a checkpoint's env state whose batch shape is not this env's."""
    if tuple(saved.shape) != expected:
        raise ValueError(
            f"{type(env).__name__} state has shape {tuple(saved.shape)}, this env expects "
            f"{expected}; resume with the same --env.num-envs as the saved run"
        )
