"""The DD-PPO strategy (Wijmans et al. 2020, "DD-PPO: Learning Near-Perfect PointGoal
Navigators from 2.5 Billion Frames"): every rank collects and learns; per minibatch one flat
all-reduce averages the gradients *and* the decision scalars riding at their tail, so every rank
decides (skip, early stop, LR) from identical numbers and takes the identical step. With
``--dist.overlap`` that sum is cut into buckets that start during backward
(``distributed/overlap.py``); the decisions are the same.

With one process (no process group) every collective is the identity, so the runner's code path
is the same for W=1 and W>1.
"""

from __future__ import annotations

import torch
from torch import nn

from distrl.algorithms.ppo import Decision, GradientLearner, decide_and_step
from distrl.distributed.collectives import Collectives
from distrl.distributed.context import DistContext


class AllReduceStrategy(Collectives):
    name = "allreduce"

    def __init__(
        self,
        ctx: DistContext,
        profile_sync: bool = False,
        timeout: float = 120.0,
        bucket_mb: float | None = None,
    ):
        super().__init__(ctx, profile_sync=profile_sync, timeout=timeout)
        self.bucket_mb = bucket_mb
        """--dist.overlap: buckets of this many MiB go out during backward (None: after it)."""

    def setup(self, policy: nn.Module, learner: GradientLearner) -> None:
        """Rank 0's parameters, buffers (normalizer) and optimizer state reach every rank as
        tensor broadcasts; a checksum then proves they match."""
        if not self.active:
            return
        self.check_install(policy)
        tensors = list(policy.parameters()) + list(policy.buffers())
        for state in learner.optimizer.state.values():
            tensors += [v for v in state.values() if torch.is_tensor(v)]
        self.broadcast_tensors_(tensors)
        self.verify_replicas(policy)
        self.overlap_backward(learner, self.bucket_mb)

    def step(self, learner: GradientLearner, flat: torch.Tensor) -> Decision:
        if self.buckets is not None:  # --dist.overlap: most buckets went out during backward
            self.buckets.reduce_(flat)
        else:
            self.allreduce_sum_(flat)  # the one collective per minibatch
        if self.group_size > 1:
            flat.div_(self.group_size)
        return decide_and_step(learner, flat)

    def verify_replicas(self, module: nn.Module) -> None:
        verify_identical(self, module)

    def gather_rank_times(self, times: list[float]) -> torch.Tensor | None:
        """One small all-gather after the iteration, outside its timings (the per-rank figures
        of ``time/*`` in each record: who waited for whom)."""
        if not self.active:
            return None
        row = torch.tensor(times, dtype=torch.float64, device=self.ctx.device)
        out = self.all_gather(row)
        self.take_times()  # (not the next iteration's communication)
        return out.cpu()


def verify_identical(collectives: Collectives, module: nn.Module) -> None:
    """Raise if any rank's (of the group's) parameters differ from rank 0's (sum, sum of
    squares and a position-weighted sum, so a permutation is caught too)."""
    if not collectives.active:
        return
    flat = torch.cat([p.detach().reshape(-1).double() for p in module.parameters()])
    weights = torch.arange(flat.numel(), device=flat.device, dtype=flat.dtype).remainder(97)
    sig = torch.stack([flat.sum(), (flat * flat).sum(), (flat * weights).sum()])
    sigs = collectives.all_gather(sig)
    bad = [r for r in range(collectives.group_size) if not torch.equal(sigs[r], sigs[0])]
    if bad:
        raise RuntimeError(
            f"parameter checksum of rank(s) {bad} differs from rank 0: {sigs.tolist()}"
        )
