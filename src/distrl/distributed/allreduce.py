"""The DD-PPO strategy (Wijmans et al. 2020, "DD-PPO: Learning Near-Perfect PointGoal
Navigators from 2.5 Billion Frames"): every rank collects and learns; gradients are averaged by
one flat all-reduce per minibatch (see ``algorithms.ppo``), and every statistic that drives a
decision is reduced globally.

With one process (no process group) every collective is the identity, so the runner's code path
is the same for W=1 and W>1.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from distrl.distributed.context import DistContext, peer_failure


class AllReduceStrategy:
    """Collectives with their time accounted: ``comm`` inside collectives, ``sync`` in the
    optional barrier that isolates waiting for the slowest rank (``profile_sync``)."""

    def __init__(self, ctx: DistContext, profile_sync: bool = False, timeout: float = 120.0):
        self.ctx = ctx
        self.timeout = timeout
        self.world_size = ctx.world_size
        self.rank = ctx.rank
        self.is_main = ctx.is_main
        self.active = ctx.distributed and ctx.world_size > 1
        self.profile_sync = profile_sync and self.active
        self._cuda = ctx.device.type == "cuda"
        self.comm_time = 0.0
        self.sync_time = 0.0

    # ---- timing ---------------------------------------------------------------------------
    def _fence(self) -> None:
        if self._cuda:  # NCCL is asynchronous: fence so time lands where it was spent
            torch.cuda.synchronize(self.ctx.device)

    def _timed(self, fn, *args, **kwargs):
        try:
            if self.profile_sync:
                self._fence()
                t0 = time.perf_counter()
                dist.barrier()
                self.sync_time += time.perf_counter() - t0
            self._fence()
            t0 = time.perf_counter()
            out = fn(*args, **kwargs)
            self._fence()
        except RuntimeError as e:  # Gloo/NCCL: a peer died, stalled or dropped its connection
            raise peer_failure(self.ctx, self.timeout, e) from e
        self.comm_time += time.perf_counter() - t0
        return out

    def take_times(self) -> tuple[float, float]:
        """(comm, sync) seconds since the last call."""
        out = (self.comm_time, self.sync_time)
        self.comm_time = self.sync_time = 0.0
        return out

    # ---- reductions -----------------------------------------------------------------------
    def allreduce_sum_(self, tensor: torch.Tensor) -> None:
        if self.active:
            self._timed(dist.all_reduce, tensor, op=dist.ReduceOp.SUM)

    def allreduce_max_(self, tensor: torch.Tensor) -> None:
        if self.active:
            self._timed(dist.all_reduce, tensor, op=dist.ReduceOp.MAX)

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """[W, *tensor.shape]; the ranks' tensors must have equal shapes."""
        if not self.active:
            return tensor.unsqueeze(0)
        flat = tensor.reshape(-1).contiguous()
        out = torch.empty(self.world_size * flat.numel(), dtype=tensor.dtype, device=tensor.device)
        self._timed(dist.all_gather_single, out, flat)
        return out.view(self.world_size, *tensor.shape)

    # ---- agreement on state ---------------------------------------------------------------
    def broadcast_tensors_(self, tensors: list[torch.Tensor], src: int = 0) -> None:
        """Broadcast tensors from ``src``, coalesced into one flat buffer per dtype."""
        if not self.active:
            return
        by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
        for t in tensors:
            by_dtype.setdefault(t.dtype, []).append(t)
        for group in by_dtype.values():
            flat = torch.cat([t.detach().reshape(-1) for t in group])
            self._timed(dist.broadcast, flat, src=src)
            offset = 0
            for t in group:
                t.data.copy_(flat[offset : offset + t.numel()].view_as(t))
                offset += t.numel()

    def sync_from_main(self, module: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """Rank 0's parameters, buffers (normalizer) and optimizer state reach every rank as
        tensor broadcasts; a checksum then proves they match."""
        if not self.active:
            return
        tensors = list(module.parameters()) + list(module.buffers())
        for state in optimizer.state.values():
            tensors += [v for v in state.values() if torch.is_tensor(v)]
        self.broadcast_tensors_(tensors)
        self.verify_replicas(module)

    def verify_replicas(self, module: nn.Module) -> None:
        """Raise if any rank's parameters differ from rank 0's (sum and sum of squares)."""
        if not self.active:
            return
        flat = torch.cat([p.detach().reshape(-1).double() for p in module.parameters()])
        sig = torch.stack(
            [
                flat.sum(),
                (flat * flat).sum(),
                (
                    flat
                    * torch.arange(flat.numel(), device=flat.device, dtype=flat.dtype).remainder(97)
                ).sum(),
            ]
        )
        sigs = self.all_gather(sig)
        bad = [r for r in range(self.world_size) if not torch.equal(sigs[r], sigs[0])]
        if bad:
            raise RuntimeError(
                f"parameter checksum of rank(s) {bad} differs from rank 0: {sigs.tolist()}"
            )

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        if not self.active:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=src)
        return box[0]

    def gather_object(self, obj: Any, dst: int = 0) -> list[Any] | None:
        """Every rank's ``obj`` on ``dst`` (None elsewhere): per-rank env and RNG state for
        checkpoints written by rank 0."""
        if not self.active:
            return [obj]
        out = [None] * self.world_size if self.rank == dst else None
        dist.gather_object(obj, out, dst=dst)
        return out

    def barrier(self) -> None:
        if self.active:
            dist.barrier()
