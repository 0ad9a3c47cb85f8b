"""A straggler for tests and benchmarks (``--dist.slow-ranks RANK:FACTOR``): every env step of
the wrapped env takes FACTOR times as long, by sleeping (FACTOR - 1) x the step's own time."""

from __future__ import annotations

import time
from typing import Any

import torch

from distrl.envs.core import VecEnv


class SlowEnv(VecEnv):
    def __init__(self, env: VecEnv, factor: float):
        self.inner, self.factor = env, factor
        self.num_envs, self.obs_dim = env.num_envs, env.obs_dim
        self.action_space, self.device = env.action_space, env.device
        self.max_episode_steps = env.max_episode_steps

    def reset(self, seed: int | None = None) -> torch.Tensor:
        return self.inner.reset(seed=seed)

    def step(self, actions: torch.Tensor):
        t0 = time.perf_counter()
        out = self.inner.step(actions)
        time.sleep((time.perf_counter() - t0) * (self.factor - 1.0))
        return out

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)

    def close(self) -> None:
        self.inner.close()
