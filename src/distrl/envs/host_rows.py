"""An ``EpisodicVecEnv`` of host simulators, one per row (Meta-World's MuJoCo envs): the rows
live in numpy, and this class turns them into the contract's tensors, with the same-step
auto-reset drawing each ended row's init state from the env's ``generator``.

A subclass steps its rows (``advance``) and starts chosen rows from chosen init states
(``start_rows``); it never resets a row by itself. ``MetaWorldMT10`` does both in this process,
``EpisodicPool`` (``envs/episodic_pool.py``) sends each subprocess its slice: the draws, the
tensors and the ``info`` are this class's either way, so the two return the same bits.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from distrl.envs.episodic import EpisodicVecEnv


class HostRowsEnv(EpisodicVecEnv):
    """Rows stepped on the host: ``obs_rows`` [N, obs_dim] float32 holds every row's current
    observation; ``generator`` draws the init states of ``reset`` and of the auto-reset."""

    obs_rows: np.ndarray
    generator: torch.Generator

    @abstractmethod
    def start_rows(self, rows: Sequence[int] | np.ndarray, inits: Sequence[int]) -> None:
        """Start row ``rows[k]`` from init state ``inits[k]`` (its ``obs_rows`` row too)."""

    @abstractmethod
    def advance(self, actions: np.ndarray) -> tuple[np.ndarray, ...]:
        """One step of every row, no resets: ``actions`` [N, A] float32 ->
        (reward [N] float32, terminated, truncated, success [N] bool); ``obs_rows`` updated."""

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        tensor = torch.from_numpy(array.copy())
        return tensor if self.device.type == "cpu" else tensor.to(self.device)

    def _random_inits(self, n: int) -> list[int]:
        return torch.randint(self.num_init_states, (n,), generator=self.generator).tolist()

    def reset(self, seed: int | None = None) -> torch.Tensor:
        if seed is not None:
            self.generator.manual_seed(seed)
        self.start_rows(range(self.num_envs), self._random_inits(self.num_envs))
        return self._tensor(self.obs_rows)

    def reset_rows(self, mask: torch.Tensor, init_indices: torch.Tensor) -> torch.Tensor:
        rows = mask.nonzero().flatten().tolist()
        self.start_rows(rows, init_indices.cpu()[rows].tolist())
        return self._tensor(self.obs_rows)

    def step(
        self, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        acts = actions.detach().to("cpu", torch.float32).numpy()
        reward, terminated, truncated, success = self.advance(acts)
        final_obs = self._tensor(self.obs_rows)
        done = (terminated | truncated).nonzero()[0]
        if len(done):  # (drawing no init state leaves the generator as it is)
            self.start_rows(done, self._random_inits(len(done)))
        info = {"final_obs": final_obs, "success": self._tensor(success)}
        return (
            self._tensor(self.obs_rows),
            self._tensor(reward),
            self._tensor(terminated),
            self._tensor(truncated),
            info,
        )
