"""The gradient all-reduce overlapped with the backward pass (DD-PPO's "overlapping
communication with backprop"): ``--dist.overlap True``, buckets of ``--dist.bucket-mb``.

The learner's gradients are views into one flat buffer (``algorithms/ppo.py``), laid out in the
order the parameters were registered. Backward produces them roughly in reverse, so the buffer
is cut into buckets walking the parameters from the last: each bucket is a contiguous slice of
about ``bucket_mb`` MiB. A ``register_post_accumulate_grad_hook`` on each parameter counts its
bucket down; when a bucket is complete, and every bucket before it has gone out, its slice's sum
over the group starts as an asynchronous all-reduce while backward goes on with the layers
below. Buckets go out strictly in bucket order, so every rank issues the same collectives in the
same order whatever order its hooks fire in; a bucket whose parameters got no gradient (unused
in this loss) goes out at the end of backward, zeros as before.

The last bucket (the first layers, whose gradients come last anyway) is not started by a hook:
it goes out after backward in one call with the decision scalars (``[bucket | scalars]``), so
the scalars cost no call of their own. With one bucket this is the one flat all-reduce of
``--dist.overlap False``, bit for bit. Then every handle is waited on, the sum is divided by the
group size and every rank decides from identical numbers, exactly as without overlap (skip on
NaN/Inf, early stop on KL, adaptive LR). At two ranks an element's sum is a + b in any bucketing,
so runs with and without overlap end bitwise equal; from three ranks on, Gloo's ring cuts each
call into chunks by its length, so an element's partial sums may be added in another order:
the results agree to float rounding (``tests/distributed/test_overlap.py``).

The non-finite flag: a bucket in flight is being summed in place, so the learner must not read
the gradient buffer after backward. Each bucket's finiteness is checked as it goes out, and the
learner asks ``grads_finite`` (set on it here) instead of reading the buffer.

Why our own hooks and not ``torch.nn.parallel.DistributedDataParallel``: DDP averages inside
its reducer and fires on every backward of the wrapped module, and it owns the gradient
buffers (its buckets are its own copies unless ``gradient_as_bucket_view``); our gradients
already live in one flat buffer that the optimizer steps and checkpoints, and the decision
scalars must be summed with them before any rank decides, which DDP has no place for (they
would need their own call and DDP's communication hook machinery around it). Some fifty lines of
hooks on the buffer we already have keep one code path for every strategy that reduces it.

Device-agnostic: the same calls run on Gloo (CPU) and NCCL (CUDA); a launch inside backward is
not fenced (a CUDA synchronize there would serialize what this overlaps), the final wait is.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from distrl.algorithms.ppo import all_finite
from distrl.distributed.liveness import peer_failure

if TYPE_CHECKING:
    from distrl.algorithms.ppo import GradientLearner
    from distrl.distributed.collectives import Collectives


class BucketedAllReduce:
    """The hooks, buckets and handles of one learner's gradient buffer in one group."""

    def __init__(self, coll: Collectives, learner: GradientLearner, bucket_mb: float):
        if bucket_mb <= 0:
            raise ValueError(f"--dist.bucket-mb must be positive, got {bucket_mb}")
        if not hasattr(learner, "grads_finite"):
            raise ValueError(f"--dist.overlap: {type(learner).__name__} has no grads_finite")
        self.coll, self.learner, self.flat = coll, learner, learner.flat
        spans = _spans(learner)
        cap = int(bucket_mb * 2**20) // learner.flat.element_size()
        self.buckets: list[tuple[int, int]] = []  # [start, end) in the flat buffer
        self.bucket_of = [0] * len(spans)
        end = size = 0
        for i in reversed(range(len(spans))):
            start, stop = spans[i]
            if size == 0:
                end = stop
            size += stop - start
            self.bucket_of[i] = len(self.buckets)
            if size >= cap or i == 0:
                self.buckets.append((start, end))
                size = 0
        self.members = [self.bucket_of.count(b) for b in range(len(self.buckets))]
        self.handles = [
            p.register_post_accumulate_grad_hook(self._hook(i))
            for i, p in enumerate(learner.params)
        ]
        learner.grads_finite = self.backward_done
        self._reset()

    def _reset(self) -> None:
        self.left = list(self.members)
        self.seen = [False] * len(self.bucket_of)
        self.next = 0  # the first bucket not yet started
        self.works: list[Any] = []
        self.finite: list[torch.Tensor] = []

    def close(self) -> None:
        """Remove the hooks (the learner reads its own buffer again)."""
        for h in self.handles:
            h.remove()
        self.learner.grads_finite = None

    # ---- during backward ---------------------------------------------------------------------
    def _hook(self, i: int) -> Any:
        def ready(param: torch.Tensor) -> None:
            if self.seen[i]:
                raise RuntimeError(
                    "--dist.overlap: a second backward into the gradient buffer before the step"
                )
            self.seen[i] = True
            self.left[self.bucket_of[i]] -= 1
            while self.next < len(self.buckets) - 1 and self.left[self.next] == 0:
                self._launch(self.next)

        return ready

    def _launch(self, b: int) -> None:
        start, end = self.buckets[b]
        part = self.flat[start:end]
        self.finite.append(all_finite(part))
        self.next = b + 1
        t0 = time.perf_counter()
        try:
            work = dist.all_reduce(part, op=dist.ReduceOp.SUM, group=self.coll.group, async_op=True)
        except RuntimeError as e:
            raise peer_failure(self.coll.ctx, self.coll.timeout, e) from e
        self.coll.comm_time += time.perf_counter() - t0
        self.works.append(work)

    def backward_done(self) -> torch.Tensor:
        """Backward is over: start the buckets no gradient completed (unused parameters) and
        say whether this rank's gradients were all finite (read before they went out)."""
        while self.next < len(self.buckets) - 1:
            self._launch(self.next)
        start, end = self.buckets[-1]
        return torch.stack([*self.finite, all_finite(self.flat[start:end])]).all()

    # ---- the step ----------------------------------------------------------------------------
    def reduce_(self, flat: torch.Tensor) -> None:
        """Sum ``flat`` (= [grads | scalars]) over the group: the last bucket with the scalars
        in one call, then wait for every bucket in flight."""
        if self.next < len(self.buckets) - 1 or len(self.finite) != self.next:
            raise RuntimeError("--dist.overlap: step without a backward through grads_finite")
        n = self.learner.num_grad
        start, end = self.buckets[-1]
        if start == 0 and end == n:  # one bucket: the one flat call, in place
            self.coll.allreduce_sum_(flat)
        else:
            last = torch.cat([flat[start:end], flat[n:]])
            self.coll.allreduce_sum_(last)
            flat[start:end] = last[: end - start]
            flat[n:] = last[end - start :]
        for work in self.works:
            self.coll._timed(work.wait, sync=False)
        self._reset()


def _spans(learner: GradientLearner) -> list[tuple[int, int]]:
    """Each parameter's [start, end) in the flat buffer; they must tile [0, num_grad) in
    parameter order (so a run of parameters is one slice)."""
    flat, out, offset = learner.flat, [], 0
    base = flat.untyped_storage().data_ptr()
    for p in learner.params:
        g = p.grad
        if g is None or g.untyped_storage().data_ptr() != base or not g.is_contiguous():
            raise ValueError("--dist.overlap needs every gradient to be a view of the flat buffer")
        start = int(g.storage_offset() - flat.storage_offset())
        if start != offset:
            raise ValueError("--dist.overlap needs the gradients laid out in parameter order")
        out.append((start, start + int(g.numel())))
        offset += g.numel()
    if offset != learner.num_grad:
        raise ValueError(f"--dist.overlap: the gradients cover {offset} of {learner.num_grad}")
    return out
