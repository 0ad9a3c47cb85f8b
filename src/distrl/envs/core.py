"""The VecEnv contract: N environments stepped as one batch of torch tensors on one device.

Shapes (N = ``num_envs``):
  reset(seed)    -> obs            [N, obs_dim] float32 (``obs_dtype``: uint8 for images)
  step(actions)  -> obs            [N, obs_dim] float32
                    reward         [N]          float32
                    terminated     [N]          bool   (MDP ended: do not bootstrap)
                    truncated      [N]          bool   (time limit: bootstrap from final_obs)
                    info           dict with at least "final_obs" [N, obs_dim]
  actions: discrete  -> [N] int64 ;  continuous -> [N, act_dim] float32 (already clipped)

An observation row is always flat: ``obs_dim`` = prod(``obs_shape``) entries in ``obs_shape``'s
order. Vector envs have ``obs_shape`` (obs_dim,) and float32 rows; image envs give ``obs_shape``
(C, H, W), channels first, and ``obs_dtype`` uint8: rows stay uint8 in rollout storage and on the
wire, and the policy's network views them as images and scales them (``policy/encoders.py``).

Done envs (terminated | truncated) reset inside the same ``step``: the returned ``obs`` row is the
first observation of the next episode, and ``info["final_obs"]`` holds the observation that ended
the episode (for rows that are not done it equals ``obs``). Truncated episodes must bootstrap from
V(final_obs), never from the reset state.

Envs never import the distributed package, never log and never touch files.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class ActionSpace:
    """What the policy emits: ``n`` for discrete; ``low``/``high`` ([act_dim]) for continuous."""

    kind: str  # "discrete" | "continuous"
    n: int = 0
    low: tuple[float, ...] = ()
    high: tuple[float, ...] = ()

    @property
    def discrete(self) -> bool:
        return self.kind == "discrete"

    @property
    def dim(self) -> int:
        """Number of policy outputs: logits for discrete, means for continuous."""
        return self.n if self.discrete else len(self.low)


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
