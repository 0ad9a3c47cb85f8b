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

    def __init__(
        self,
        dim: int,
        eps: float = 1e-8,
        clip: float = 10.0,
        enabled: bool = True,
        raw: int = 0,
    ):
        super().__init__()
        self.enabled = enabled
        self.raw = raw  # the first ``raw`` entries pass as they are (an agent group's one-hot)
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
        y = ((x - self.mean) * self.inv_std).clamp_(-self.clip, self.clip)
        if self.raw:
            return torch.cat([x[..., : self.raw], y[..., self.raw :]], -1)
        return y

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


class PopArt(nn.Module):
    """Per-task value normalization that preserves outputs: PopArt (van Hasselt et al. 2016,
    "Learning values across many orders of magnitude"), one statistic per task as in Hessel et
    al. 2019 ("Multi-task deep RL with PopArt").

    The critic has one output per task; output k predicts task k's value target normalized by
    that task's running mean ``mu[k]`` and standard deviation ``sigma[k]``, and a sample's value
    is its own task's output, denormalized. The task of a sample is the one-hot in the last
    ``num_tasks`` entries of its raw observation (the MT10 envs put it there). Once per
    iteration ``update`` moves the statistics towards the moments of that iteration's value
    targets (summed over ranks, so every rank moves them alike) and rescales the critic's output
    layer so that every denormalized value stays what it was; the value loss is then taken in
    normalized units, so each task's gradient has the same scale whatever its rewards' scale.
    The policy's advantages are divided by their task's sigma too (``scale_advantages``, with
    the statistics of the previous iterations, before any batch normalization of advantages),
    as Hessel et al. do, so that no task's policy gradient outweighs another's by its reward
    scale.

    The statistics are exponential moving averages of the first and second moment with weight
    ``beta`` per iteration (the first batch of a task sets them); sigma is kept in
    [``SIGMA_MIN``, ``SIGMA_MAX``].
    """

    SIGMA_MIN, SIGMA_MAX = 1e-4, 1e6

    # Buffers registered in __init__.
    m1: torch.Tensor
    m2: torch.Tensor
    seen: torch.Tensor
    mu: torch.Tensor
    sigma: torch.Tensor

    def __init__(self, num_tasks: int, beta: float = 0.1):
        super().__init__()
        self.num_tasks, self.beta = num_tasks, beta
        self.register_buffer("m1", torch.zeros(num_tasks, dtype=torch.float64))
        self.register_buffer("m2", torch.ones(num_tasks, dtype=torch.float64))
        self.register_buffer("seen", torch.zeros(num_tasks, dtype=torch.bool))
        self.register_buffer("mu", torch.zeros(num_tasks))
        self.register_buffer("sigma", torch.ones(num_tasks))

    def task_of(self, obs: torch.Tensor) -> torch.Tensor:
        """Task index [...] of raw observations [..., D]."""
        return obs[..., -self.num_tasks :].argmax(-1)

    def denormalize(self, out: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        """Values [N] from the critic's outputs [N, num_tasks] (each sample its task's output)."""
        task = self.task_of(obs)
        v = out.gather(-1, task.unsqueeze(-1)).squeeze(-1)
        return v * self.sigma[task] + self.mu[task]

    def normalize(self, values: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        """Values or targets [N] in their task's normalized units."""
        task = self.task_of(obs)
        return (values - self.mu[task]) / self.sigma[task]

    def scale_advantages(self, advantages: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        """Advantages [...] divided by their task's sigma (raw observations [..., D])."""
        return advantages / self.sigma[self.task_of(obs)]

    def moments(self, targets: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        """[count per task, sum per task, sum of squares per task] (float64 [3 * num_tasks]) of
        the value targets [...] with their raw observations [..., D]; summed over ranks they
        give the global batch's. Refuses observations whose last entries are not a one-hot."""
        onehot = obs[..., -self.num_tasks :].reshape(-1, self.num_tasks).to(torch.float64)
        ok = ((onehot == 0) | (onehot == 1)).all() and bool((onehot.sum(-1) == 1).all())
        if not ok:
            raise ValueError(
                f"--policy.popart-tasks {self.num_tasks}: the last {self.num_tasks} entries of "
                f"every observation must be a one-hot task id, and some are not; set it to the "
                f"width of the env's task one-hot (MT10: 10), or 0 to turn PopArt off"
            )
        x = targets.reshape(-1, 1).to(torch.float64)
        return torch.cat([onehot.sum(0), (onehot * x).sum(0), (onehot * x * x).sum(0)])

    @torch.no_grad()
    def update(self, summed: torch.Tensor, head: nn.Linear) -> None:
        """Move the statistics towards the global moments ``summed`` (from ``moments``, summed
        over ranks) and rescale ``head`` (the critic's output layer, [num_tasks] outputs) so
        that the denormalized values are unchanged. Tasks without samples keep theirs."""
        K = self.num_tasks
        count, s1, s2 = summed[:K], summed[K : 2 * K], summed[2 * K :]
        has = count > 0
        n = count.clamp_min(1.0)
        weight = torch.where(self.seen, torch.full_like(n, self.beta), torch.ones_like(n))
        weight = torch.where(has, weight, torch.zeros_like(n))
        m1 = (1 - weight) * self.m1 + weight * (s1 / n)
        m2 = (1 - weight) * self.m2 + weight * (s2 / n)
        sigma = (m2 - m1 * m1).clamp_min(0.0).sqrt().clamp(self.SIGMA_MIN, self.SIGMA_MAX)
        old_mu, old_sigma = self.mu.to(torch.float64), self.sigma.to(torch.float64)
        w64, b64 = head.weight.to(torch.float64), head.bias.to(torch.float64)
        head.weight.copy_(w64 * (old_sigma / sigma).unsqueeze(-1))
        head.bias.copy_((old_sigma * b64 + old_mu - m1) / sigma)
        self.m1.copy_(m1)
        self.m2.copy_(m2)
        self.seen |= has
        self.mu.copy_(m1)
        self.sigma.copy_(sigma)
