"""Running observation normalization and return-based reward scaling, with mergeable moments.

Moments are kept as (count, mean, M2) in float64, where M2 = sum of squared deviations, so that
statistics from several batches (or several ranks) merge exactly (Chan, Golub & LeVeque 1979):

    n = n_a + n_b,  delta = mean_b - mean_a
    mean = mean_a + delta * n_b / n
    M2   = M2_a + M2_b + delta^2 * n_a * n_b / n
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class Moments:
    """Sufficient statistics of a batch of vectors: count, mean [D], M2 [D] (all float64)."""

    count: torch.Tensor
    mean: torch.Tensor
    m2: torch.Tensor

    @staticmethod
    def of(x: torch.Tensor) -> Moments:
        """Moments of x [B, D]."""
        x = x.to(torch.float64)
        mean = x.mean(0)
        m2 = ((x - mean) ** 2).sum(0)
        return Moments(
            torch.tensor(float(x.shape[0]), dtype=torch.float64, device=x.device), mean, m2
        )

    def merge(self, other: Moments) -> Moments:
        n = self.count + other.count
        if float(n) == 0.0:
            return self
        delta = other.mean - self.mean
        mean = self.mean + delta * (other.count / n)
        m2 = self.m2 + other.m2 + delta**2 * (self.count * other.count / n)
        return Moments(n, mean, m2)

    def to(self, device: torch.device) -> Moments:
        return Moments(self.count.to(device), self.mean.to(device), self.m2.to(device))

    def to_flat(self) -> torch.Tensor:
        """[count, count*mean..., M2 + count*mean^2 ...]: summing these across ranks and calling
        ``from_flat_sum`` gives the exact merged moments (the sum of raw power sums)."""
        return torch.cat(
            [self.count.view(1), self.count * self.mean, self.m2 + self.count * self.mean**2]
        )

    @staticmethod
    def from_flat_sum(flat: torch.Tensor) -> Moments:
        d = (flat.numel() - 1) // 2
        n = flat[0]
        mean = flat[1 : 1 + d] / n
        m2 = (flat[1 + d :] - n * mean**2).clamp_min(0.0)
        return Moments(n, mean, m2)


class RunningNorm(nn.Module):
    """y = clip((x - mean) / sqrt(var + eps), -clip, clip). Statistics are buffers (checkpointed,
    broadcast with the parameters) and only change through ``update``, never in forward."""

    # Buffers registered in __init__ (annotated so that type checkers see Tensors).
    count: torch.Tensor
    mean64: torch.Tensor
    m2: torch.Tensor
    mean: torch.Tensor
    inv_std: torch.Tensor

    def __init__(self, dim: int, eps: float = 1e-8, clip: float = 10.0, enabled: bool = True):
        super().__init__()
        self.enabled = enabled
        self.frozen = False  # statistics kept as they are (train --init-from; not checkpointed)
        self.eps, self.clip = eps, clip
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self.register_buffer("mean64", torch.zeros(dim, dtype=torch.float64))
        self.register_buffer("m2", torch.zeros(dim, dtype=torch.float64))
        # float32 copies used in forward, refreshed on update.
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("inv_std", torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.enabled:
            return x
        return ((x - self.mean) * self.inv_std).clamp_(-self.clip, self.clip)

    def moments(self) -> Moments:
        return Moments(self.count.clone(), self.mean64.clone(), self.m2.clone())

    @torch.no_grad()
    def update(self, batch: Moments) -> None:
        """Merge the (already global) moments of a new batch into the running statistics
        (nothing changes while ``frozen``)."""
        if not self.enabled or self.frozen:
            return
        # moments counted on the CPU (demonstrations, episodic counts) meet statistics on a GPU
        merged = self.moments().merge(batch.to(self.count.device))
        self.count.copy_(merged.count)
        self.mean64.copy_(merged.mean)
        self.m2.copy_(merged.m2)
        var = merged.m2 / merged.count.clamp_min(1.0)
        self.mean.copy_(merged.mean.to(self.mean.dtype))
        self.inv_std.copy_((var + self.eps).rsqrt().to(self.inv_std.dtype))


class ReturnScale(RunningNorm):
    """Reward scaling by the running standard deviation of the discounted return, as Gymnasium's
    ``NormalizeReward`` and SB3's ``VecNormalize(norm_reward=True)`` do (CleanRL's and rl-zoo3's
    MuJoCo and Pendulum PPO use it): r / sqrt(Var[G] + eps), clipped to [-clip, clip], where
    G_t = gamma * G_{t-1} + r_t per env and G restarts after an episode ends. No mean is
    subtracted: shifting rewards would change what the optimal policy of a terminating task is.

    The collector scales each rollout with the statistics agreed after the previous one (the
    first rollout sees unit scale), so every rank scales by the same number; the moments of this
    rollout's G are summed over ranks like the observation moments and merged after the update.
    """

    def __init__(self, eps: float = 1e-8, clip: float = 10.0):
        super().__init__(1, eps=eps, clip=clip)

    def forward(self, r: torch.Tensor) -> torch.Tensor:
        return (r * self.inv_std).clamp_(-self.clip, self.clip)
