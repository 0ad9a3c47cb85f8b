"""``--dist.strategy elastic``: data-parallel PPO (every rank collects and learns, one flat
all-reduce per minibatch, as ``allreduce``) that survives a lost rank without a restart.

Why a strategy and not an option of ``allreduce``: it needs its own launcher. torchrun's agent
stops every rank when one dies and restarts them all, so survivors cannot go on under it;
``distrl train --nproc N --dist.strategy elastic`` instead starts the N rank processes itself
(``distributed/elastic_launch.py``), hosts a membership store on loopback, and restarts only
the process that died. TorchFT (a quorum server and one process group per replica group) was
evaluated and not used: see docs/reliability.md, "Elastic data-parallel training".

Membership lives in the launcher's TCPStore under ``el/``; each *epoch* is one membership (a
list of ``slot:id:pid``, the id unique in the run) and one Gloo process group made from a
``PrefixStore`` of that epoch:

- **start**: every slot writes ``el/want/<slot>``; epoch 0 is all N slots.
- **a rank dies or stalls** (collectives fail: at once on a dead peer's ring neighbours,
  after ``--dist.timeout`` on the other survivors and for a stopped peer): each survivor drops
  its process group, rolls its learner back to the start of the iteration unless its update
  had completed, and votes ``el/<e>/vote/<slot>`` with the iteration it holds. The first
  survivor that sees every member voted, dead (the launcher marks a process that exited,
  ``el/dead/<id>``) or stalled (each process's beat thread writes ``el/hb/<id>`` every 0.5 s;
  a stopped one's is 3 s old), or 2 x ``--dist.timeout`` + 5 s pass since its own vote, writes the
  next epoch's members once (``compare_set``) and marks the others ``el/out/<id>`` (the
  launcher kills such a process, and starts a replacement). The survivors form the new group,
  and the one holding the newest iteration (the lowest slot on a tie) broadcasts its learner
  state to all: the iteration is discarded, not half-applied, and every replica stays bitwise
  identical. Gradient averaging and every agreed statistic then run over the live ranks.
- **a replacement** (the launcher restarting a slot) writes its ``el/want`` and waits; the
  epoch leader sees it at the next iteration (one store read per iteration), says so in the
  ``reduce_stats`` row every rank already exchanges, and at that iteration's end every member
  and the newcomer form the next epoch; the leader's state (weights, optimizer, normalizers,
  iteration, env steps) reaches the newcomer over the new group, never from disk.

Env steps count only committed iterations of the ranks that took part in them. Each rank's
random streams are fixed by the seed, its slot and the epoch it joined at (a replacement seeds
``seed + slot + N * epoch``), so the same failures at the same iterations give the same run.
Slot 0 writes metrics and checkpoints, as rank 0 does elsewhere; when the writer is lost, the
lowest surviving slot becomes the writer (every survivor computes the same from the decided
members) and opens the run's sinks (``Runner.take_over_writing``); checkpoints gather to it.
"""

from __future__ import annotations

import io
import json
import os
import time
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from distrl.distributed.allreduce import AllReduceStrategy
from distrl.distributed.base import Agreed
from distrl.distributed.context import DistContext
from distrl.distributed.liveness import PeerFailure, RankDropped
from distrl.distributed.membership import (  # re-exported: the launcher's names
    ID_ENV,
    JOIN_ENV,
    STANDBY_ENV,
    START_WAIT,
    STORE_ENV,
    Member,
    Membership,
    stand_by,
)
from distrl.telemetry import to_jsonable
from distrl.training_state import TrainingState

if TYPE_CHECKING:
    from distrl.runner.base import Runner

__all__ = ["ID_ENV", "JOIN_ENV", "STANDBY_ENV", "START_WAIT", "STORE_ENV", "build", "stand_by"]


class ElasticAllReduce(AllReduceStrategy):
    name = "elastic"

    def __init__(
        self, ctx: DistContext, membership: Membership, profile_sync: bool, timeout: float
    ):
        super().__init__(ctx, profile_sync=profile_sync, timeout=timeout)
        self.membership = membership
        self.active = True  # a group of one still regroups when others join
        self._joining = False
        self._sync_pending = membership.joined_late
        if membership.joined_late:  # a replacement's own streams: seed, slot, epoch it joined
            self.seed_rank = ctx.rank + ctx.world_size * membership.epoch
        self.failures = 0
        self.joins = 0
        self._follow()

    def _follow(self) -> None:
        """Rank, group size and the writer role from the current epoch."""
        m = self.membership
        self.rank, self.world_size = m.index, len(m.members)
        self.group_size = self.world_size
        self.is_main = self.ctx.rank == m.writer  # writes metrics and checkpoints

    @property
    def num_collectors(self) -> int:
        return self.world_size

    def gather_rank_times(self, times: list[float]) -> torch.Tensor | None:
        """None: a collective after the update would be one more place to lose a peer in,
        where the iteration is already complete (``recover`` keeps it or not by where it
        failed); the members' rollout times are in the record (``time/rollout_max``)."""
        return None

    def setup(self, policy: Any, learner: Any) -> None:
        if not self._sync_pending:  # a replacement takes everything from a peer instead
            super().setup(policy, learner)

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        if self._sync_pending:  # a replacement's start-up: the members are mid-run
            return obj
        return super().broadcast_object(obj, src)

    def heartbeat(self, iteration: int) -> None:
        """Nothing: the membership store knows who is in."""

    def gather_object(self, obj: Any, dst: int = 0) -> list[Any] | None:
        """Every member's ``obj`` on the writer (``dst`` is ignored: the writer may not be the
        first member), by slot: None for a slot not in this epoch (a checkpoint then holds the
        live slots' states, and a resume starts the others' envs fresh)."""
        m = self.membership
        writer = next(i for i, x in enumerate(m.members) if x.slot == m.writer)
        got = super().gather_object(obj, writer)
        if got is None:
            return None
        out: list[Any] = [None] * self.ctx.world_size
        for member, o in zip(m.members, got, strict=True):
            out[member.slot] = o
        return out

    def _timed(self, fn: Any, *args: Any, sync: bool = True, **kwargs: Any) -> Any:
        """Tensor collectives run asynchronously and are waited on by ``Membership.wait``
        (which gives up as soon as the epoch is known broken); object collectives as usual."""
        if fn in _WATCHED:
            return super()._timed(self._watched, fn, *args, sync=sync, **kwargs)
        return super()._timed(fn, *args, sync=sync, **kwargs)

    def _watched(self, fn: Any, *args: Any, **kwargs: Any) -> None:
        self.membership.wait(fn(*args, async_op=True, **kwargs))

    # ---- the exchange each iteration already makes ------------------------------------------
    def reduce_stats(
        self, sums: dict[str, torch.Tensor], gather: dict[str, torch.Tensor] | None = None
    ) -> Agreed:
        gather = dict(gather or {})
        note = 1.0 if self.membership.joins_waiting() else 0.0
        gather["elastic/join"] = torch.tensor([note], dtype=torch.float64)
        agreed = super().reduce_stats(sums, gather)
        self._joining = bool(agreed.gathered.pop("elastic/join").sum() > 0)
        slots = tuple(m.slot for m in self.membership.members)
        return Agreed(agreed.sums, agreed.gathered, slots, slots)

    def record_metrics(self) -> dict[str, Any]:
        return {
            "dist/members": self.world_size,
            "dist/epoch": self.membership.epoch,
            "dist/failures": self.failures,
            "dist/joins": self.joins,
        }

    # ---- recovery (runner.roles.collect_and_learn) ------------------------------------------
    @property
    def recovery(self) -> ElasticAllReduce:
        """This strategy survives a lost peer: the role loop asks it to (``Recovery``)."""
        return self

    def enter(self, runner: Runner) -> None:
        """A replacement joining a running group takes the members' state before its first
        iteration."""
        if not self._sync_pending:
            return
        self._sync_state(runner, self.membership.source())
        self._sync_pending = False
        m = self.membership
        runner.message(
            f"elastic: slot {self.ctx.rank} joined at epoch {m.epoch}, iteration "
            f"{runner.iteration}, state from slot {m.members[m.source()].slot}"
        )

    def boundary(self, runner: Runner) -> None:
        """After an iteration: where the members agreed a process waits to join (the note in
        ``reduce_stats``), it joins now and receives the state."""
        if not self._joining or runner.done:  # (done is agreed: the same on every member)
            return
        self._joining = False
        t0 = time.perf_counter()
        added = self.membership.admit()
        for line in self.membership.refused:
            runner.message(f"elastic: {line}")
        self.membership.refused.clear()
        self._follow()
        self.joins += added  # (before the sync, which carries the counts to the newcomer)
        self._sync_state(runner, self.membership.source())
        if added:  # (none: the one asking was refused, said above)
            runner.message(
                f"elastic: {added} rank(s) joined at iteration {runner.iteration}: "
                f"{len(self.membership.members)} members, epoch {self.membership.epoch} "
                f"({time.perf_counter() - t0:.2f} s)"
            )

    def recover(self, runner: Runner, held: TrainingState, error: PeerFailure) -> None:
        """A peer was lost inside the iteration begun from ``held``: it is discarded (or kept,
        where this rank's update had completed), the survivors regroup and go on from the state
        of the one holding the newest iteration."""
        if isinstance(error, RankDropped):
            raise error
        t0 = time.perf_counter()
        self._joining = False  # the note of a failed iteration is void; the leader asks again
        if runner.iteration == held.iteration:  # the update did not complete here
            runner.load_training_state(held, rank=False)
        lost: list[Member] = []
        was_writer = self.is_main
        for attempt in range(1, 6):
            try:
                src, gone = self.membership.regroup(runner.iteration)
                lost += gone
                self._follow()
                self.failures += 1
                self._sync_state(runner, src)
                break
            except RankDropped:
                raise
            except PeerFailure:  # another member was lost while regrouping: once more
                if attempt == 5:
                    raise
        if self.is_main and not was_writer:  # the writer was lost: this process writes now
            _take_over_writing(runner)
        if self.is_main:  # an iteration kept whose writer died, or rolled back, before logging
            _log_held_iteration(runner)
        self.take_times()
        what = ", ".join(f"slot {m.slot} (pid {m.pid})" for m in lost) or "none"
        restarts = int(os.environ.get("DISTRL_MAX_RESTARTS", runner.cfg.max_restarts) or 0)
        refill = (
            f"a replacement rejoins at an iteration boundary (--max-restarts {restarts})"
            if restarts > 0
            else "none will replace it (--max-restarts 0): the batch stays smaller"
        )
        runner.message(
            f"elastic: lost {what} at iteration {runner.iteration}; {self.world_size} ranks go "
            f"on (membership change {self.membership.epoch}, regrouped in "
            f"{time.perf_counter() - t0:.2f} s); {refill}. What the survivors saw: "
            f"{str(error).splitlines()[0][:160]}"
        )
        try:
            self._checkpoint_held(runner)
        except PeerFailure as again:  # another member lost while saving: survive that too
            self.recover(runner, runner.training_state(rank=False).copy(), again)

    def _checkpoint_held(self, runner: Runner) -> None:
        """The held iteration's checkpoint, where one was due (its interval, or the run's
        end): the writer may have died before or while it wrote it. Every member takes part,
        as in the iteration; where the checkpoint had been written, it is written again."""
        rec = runner.last_record
        if rec is None or rec.get("iteration") != runner.iteration or not runner.checkpoint_due():
            return
        runner.checkpoint(float(rec["wall_time"]), int(rec.get("train/skipped_updates") or 0))

    def _sync_state(self, runner: Runner, src: int) -> None:
        """Member ``src``'s training state (its replica part and newest record) to every
        member, as one broadcast of its bytes."""
        if self.rank == src:
            buf = io.BytesIO()
            state = runner.training_state(rank=False)
            counts = torch.tensor([self.failures, self.joins])  # the run's, not this process's
            record = json.dumps(to_jsonable(state.record))  # a writer may lack it
            torch.save({**state.replica, "record": record, "elastic/counts": counts}, buf)
            data = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)
            size = torch.tensor([data.numel()], dtype=torch.int64)
        else:
            size = torch.zeros(1, dtype=torch.int64)
        self._timed(dist.broadcast, size, src=src, sync=False)
        if self.rank != src:
            data = torch.empty(int(size.item()), dtype=torch.uint8)
        self._timed(dist.broadcast, data, src=src, sync=False)
        if self.rank != src:
            got = torch.load(io.BytesIO(data.numpy().tobytes()), weights_only=True)
            self.failures, self.joins = map(int, got.pop("elastic/counts").tolist())
            record = json.loads(got.pop("record"))
            runner.load_training_state(TrainingState(got, record=record), rank=False)
            runner.last_record = record

    def finish(self) -> None:
        if self.membership.leader:
            self.membership.finish()


def _take_over_writing(runner: Runner) -> None:
    """This process writes the run from now on (metrics, TensorBoard, checkpoints): the one
    that did was lost and the members went on without it."""
    if runner.tel.enabled or runner.open_sinks is None:
        return
    runner.tel = runner.open_sinks()
    runner.message(f"writer: this process writes the run from iteration {runner.iteration} on")


def _log_held_iteration(runner: Runner) -> None:
    """On the writer: log the record of the iteration this process holds if the sinks have none
    for it (the members kept an iteration whose writer, or whose records, were lost before it
    logged it; ``last_record`` came with the state they agreed)."""
    rec, logged = runner.last_record, runner.tel.last_iteration
    if not runner.tel.enabled or rec is None or rec.get("iteration") != runner.iteration:
        return
    if logged is None or logged < runner.iteration:
        runner.tel.log(rec)
        runner.message(f"writer: logged iteration {runner.iteration}, which its writer had not")


_membership: Membership | None = None


_WATCHED = (dist.all_reduce, dist.all_gather, dist.broadcast, dist.barrier)


def enter_run(slot: int, slots: int, timeout: float, backend: str) -> None:
    """This process joins the run (``build``, in a rank the elastic launcher started): at the
    start with every slot, or, as a replacement, at the next iteration boundary."""
    global _membership
    if backend != "gloo":
        raise ValueError(
            f"--dist.strategy elastic runs on Gloo (CPU tensors) for now, got backend {backend}; "
            f"use --device cpu (its regrouping has not run on NCCL)"
        )
    _membership = Membership.connect(slot, slots, timeout, backend)
    _membership.join()


def build(ctx: DistContext, cfg: Any) -> ElasticAllReduce:
    """The strategy of a rank the elastic launcher started (``STRATEGIES['elastic']``)."""
    if _membership is None and os.environ.get(STORE_ENV):  # the elastic launcher's rank
        enter_run(ctx.rank, ctx.world_size, cfg.dist.timeout, ctx.backend or "gloo")
    if _membership is None:
        raise ValueError(
            "--dist.strategy elastic starts its own rank processes: run it with distrl train "
            "--nproc N (torchrun's agent stops and restarts every rank when one dies, so the "
            "survivors could not go on under it)"
        )
    return ElasticAllReduce(ctx, _membership, cfg.dist.profile_sync, cfg.dist.timeout)
