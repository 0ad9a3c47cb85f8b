"""Collectives with their time accounted and their failures named.

Every strategy reaches ``torch.distributed`` through ``Collectives._timed``: the call is fenced
(CUDA work is asynchronous), timed into ``comm``, optionally preceded by a barrier whose wait is
timed into ``sync`` (``--dist.profile-sync``), and a backend error (a peer died, stalled past
``--dist.timeout`` or dropped its connection) becomes a ``PeerFailure`` naming the silent rank.
With one process every method is the identity.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from distrl import interrupts
from distrl.distributed.base import Agreed, Role
from distrl.distributed.context import DistContext
from distrl.distributed.liveness import heartbeat, peer_failure
from distrl.distributed.overlap import BucketedAllReduce
from distrl.distributed.transport import install_mismatch, install_signature

if TYPE_CHECKING:
    from distrl.algorithms.ppo import GradientLearner


class Collectives:
    role = Role()
    """Every rank collects and learns, unless a side says otherwise."""

    def __init__(self, ctx: DistContext, profile_sync: bool = False, timeout: float = 120.0):
        self.ctx = ctx
        self.timeout = timeout
        self.world_size = ctx.world_size
        self.rank = ctx.rank
        self.is_main = ctx.is_main
        self.active = ctx.distributed and ctx.world_size > 1
        self.env_rows = 0  # set by the runner (Strategy.env_rows); 0: --env.num-envs
        self.profile_sync = profile_sync and self.active
        self._cuda = ctx.device.type == "cuda"
        self.comm_time = 0.0
        self.sync_time = 0.0
        self.seed_rank = ctx.rank  # the rank whose seed this process uses (see base.Strategy)
        # Tensor collectives run in ``group`` (None: every rank) of ``group_size`` ranks; object
        # collectives and barriers in ``object_group``. Strategies that split the ranks set them.
        self.group: Any = None
        self.group_size = ctx.world_size
        self.object_group: Any = None
        # Defaults of the Strategy protocol for a strategy whose every rank collects and learns
        self.stop_requested = False
        self.interrupt = 0
        self.stats_agreed = True
        self.buckets: BucketedAllReduce | None = None
        """--dist.overlap: the gradient all-reduce that runs during backward (``overlap``)."""

    @property
    def num_collectors(self) -> int:
        return self.world_size

    @property
    def collector_index(self) -> int:
        return self.rank

    # ---- timing ---------------------------------------------------------------------------
    @property
    def measures_sync(self) -> bool:
        return self.profile_sync or not self.active

    def _fence(self) -> None:
        if self._cuda:  # NCCL is asynchronous: fence so time lands where it was spent
            torch.cuda.synchronize(self.ctx.device)

    def _timed(self, fn: Callable[..., Any], *args: Any, sync: bool = True, **kwargs: Any) -> Any:
        """Run one collective; ``sync=False`` skips the profiling barrier (object collectives
        and barriers themselves, which are not on the per-minibatch path)."""
        try:
            if sync and self.profile_sync:
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

    def heartbeat(self, iteration: int) -> None:
        if self.active:
            heartbeat(self.ctx, iteration)

    # ---- interrupts -----------------------------------------------------------------------
    def interrupt_note(self) -> int:
        """What this rank adds to the exchange: the signal it received, or its stop request
        (0: neither; ``interrupts.note``)."""
        return interrupts.note()

    def agree_interrupt(self, notes: torch.Tensor) -> None:
        """Every participating rank's note, the same on each: stop after this iteration if any
        rank was signalled or asked to stop (the first signal in rank order names the signal,
        and outranks a stop request: ``interrupts.merge``)."""
        agreed, pause = 0, False
        for n in map(int, notes.tolist()):
            agreed = interrupts.merge(agreed, n & ~interrupts.PAUSE)
            pause = pause or bool(n & interrupts.PAUSE)
        if agreed and not interrupts.is_signal(self.interrupt):
            self.interrupt = agreed
            self.stop_requested = True
        if pause:  # Ctrl-Z at the launcher: every rank stops here, after the same collective
            interrupts.pause_now()

    def finish(self) -> None:
        """Nothing to tell anyone (strategies with a server override this)."""

    @property
    def recovery(self) -> Any:
        """None: a lost peer ends the run, naming it (``elastic`` survives one)."""
        return None

    def record_metrics(self) -> dict[str, Any]:
        """What the strategy adds to each iteration's record (none here)."""
        return {}

    def gather_rank_times(self, times: list[float]) -> torch.Tensor | None:
        """Every rank's ``times`` (its rollout, learn, comm and sync seconds of the iteration),
        [ranks, 4] on each, where the strategy's ranks all run the iteration together; None
        where they do not (the default: a server's workers, actors, one process)."""
        return None

    # ---- tensors --------------------------------------------------------------------------
    def allreduce_sum_(self, tensor: torch.Tensor) -> None:
        if self.active:
            self._timed(dist.all_reduce, tensor, op=dist.ReduceOp.SUM, group=self.group)

    def overlap_backward(self, learner: GradientLearner, bucket_mb: float | None) -> None:
        """Sum ``learner``'s gradients in buckets during backward (``bucket_mb`` MiB each;
        None: after it, in one call); a learner set up before is let go."""
        if self.buckets is not None:
            self.buckets.close()
            self.buckets = None
        if self.active and bucket_mb is not None:
            self.buckets = BucketedAllReduce(self, learner, bucket_mb)

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """[W, *tensor.shape]; the ranks' tensors must have equal shapes."""
        if not self.active:
            return tensor.unsqueeze(0)
        flat = tensor.reshape(-1).contiguous()
        n = self.group_size
        out = torch.empty(n, flat.numel(), dtype=tensor.dtype, device=tensor.device)
        # the list form into views of one buffer: every backend and torch >= 2.3 has it
        # (all_gather_single, used before, is absent from torch 2.11: seen on a GPU machine)
        self._timed(dist.all_gather, list(out.unbind(0)), flat, group=self.group)
        return out.view(n, *tensor.shape)

    def reduce_stats(
        self, sums: dict[str, torch.Tensor], gather: dict[str, torch.Tensor] | None = None
    ) -> Agreed:
        """Every rank's named tensors, packed into one float64 row and all-gathered in one
        collective; ``sums`` are then added up over ranks (in rank order, so every rank computes
        bit-identical totals) and ``gather`` kept per rank.

        The row ends with one more word, this rank's interrupt note (``interrupt_note``): every
        rank reads every rank's, so all agree to stop after this iteration when any was
        signalled, whichever it was and whenever the signal came (``distrl.interrupts``)."""
        gather = gather or {}
        named = [*sums.items(), *gather.items()]
        # on the rank's device (NCCL moves CUDA tensors only); some counts live on the CPU
        device = self.ctx.device
        word = self.interrupt_note() | interrupts.pause_word()
        note = torch.tensor([float(word)], dtype=torch.float64)
        parts = [t.detach().reshape(-1).to(device, torch.float64) for _, t in named]
        rows = self.all_gather(torch.cat([*parts, note.to(device)]))
        self.agree_interrupt(rows[:, -1])
        rows = rows[:, :-1]
        total = rows[0].clone()
        for r in range(1, rows.shape[0]):
            total += rows[r]
        out, offset = Agreed(), 0
        for name, t in named:
            n = t.numel()
            if name in sums:
                out.sums[name] = total[offset : offset + n].view(t.shape)
            else:
                out.gathered[name] = rows[:, offset : offset + n].reshape(-1, *t.shape)
            offset += n
        out.collectors = tuple(range(rows.shape[0]))  # every rank of the group: all its rows
        return out

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

    # ---- objects and barriers (bookkeeping, not the hot path) -------------------------------
    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        if not self.active:
            return obj
        box = [obj]
        self._timed(dist.broadcast_object_list, box, src=src, group=self.object_group, sync=False)
        return box[0]

    def gather_object(self, obj: Any, dst: int = 0) -> list[Any] | None:
        """Every rank's ``obj`` on ``dst`` (None elsewhere), e.g. per-rank env and RNG state
        for checkpoints written by rank 0."""
        if not self.active:
            return [obj]
        out = [None] * self.world_size if self.rank == dst else None
        self._timed(dist.gather_object, obj, out, dst=dst, group=self.object_group, sync=False)
        return out

    def check_install(self, policy: torch.nn.Module) -> None:
        """Every rank runs the same install: the distrl version, the message layout and the
        policy's shapes agree (one object all-gather at setup), or every rank raises naming the
        ranks that differ, before a message is misread."""
        if not self.active:
            return
        mine = install_signature(policy)
        every: list[Any] = [None] * self.world_size
        self._timed(dist.all_gather_object, every, mine, group=self.object_group, sync=False)
        problem = install_mismatch(every)
        if problem is not None:
            raise ValueError(f"rank {self.rank}/{self.world_size}: {problem}")

    def barrier(self) -> None:
        if self.active:
            self._timed(dist.barrier, group=self.object_group, sync=False)
