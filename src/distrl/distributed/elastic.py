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

import contextlib
import copy
import datetime
import io
import json
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from distrl.distributed.allreduce import AllReduceStrategy
from distrl.distributed.base import Agreed
from distrl.distributed.context import DistContext
from distrl.distributed.liveness import PeerFailure, RankDropped
from distrl.telemetry import to_jsonable

if TYPE_CHECKING:
    from distrl.runner.base import Runner

STANDBY_ENV = "DISTRL_ELASTIC_STANDBY"
"""Set for the launcher's warm spare: imported and connected, it waits to be given a slot."""
STORE_ENV = "DISTRL_ELASTIC"
"""host:port of the launcher's membership store, in every rank's environment."""
JOIN_ENV = "DISTRL_ELASTIC_JOIN"
"""Set for a replacement process: it joins a running epoch and takes its state from a peer."""
ID_ENV = "DISTRL_ELASTIC_ID"
"""The process's member id, unique in the run (the launchers count them in the store,
``el/ids``): pids are not, across machines."""
POLL = 0.02
BEAT, STALE = 0.5, 3.0
"""Every rank's beat thread writes ``el/hb/<id>`` every BEAT s; older than STALE s: stalled."""
START_WAIT = 300.0
"""Seconds the first members wait for every slot (on every node) to say it is there."""


def _client(timeout: float) -> Any:
    host, port = os.environ[STORE_ENV].rsplit(":", 1)
    return dist.TCPStore(
        host,
        int(port),
        is_master=False,
        timeout=datetime.timedelta(seconds=max(timeout, 30.0)),
        use_libuv=True,
    )


def _beat(uid: int, timeout: float) -> None:
    """This process is alive and running (a thread of its own, its own connection: the main
    thread may be blocked in a collective)."""
    store = _client(timeout)
    with contextlib.suppress(Exception):  # the launcher (and its store) went away: stop
        while True:
            store.set(f"el/hb/{uid}", f"{time.time():.3f}")
            time.sleep(BEAT)


@dataclass(frozen=True)
class Member:
    """One rank process: its slot (the rank it was started as), its id in the run (the store's
    keys name it) and its pid (for people: pids repeat across machines)."""

    slot: int
    uid: int
    pid: int

    def __str__(self) -> str:
        return f"{self.slot}:{self.uid}:{self.pid}"


def _parse(text: str) -> list[Member]:
    return [Member(*map(int, x.split(":"))) for x in text.split(",") if x]


def own_id() -> int:
    """This process's member id (``ID_ENV``, set by the launcher)."""
    return int(os.environ[ID_ENV])


def _text(members: list[Member]) -> str:
    return ",".join(map(str, members))


class Membership:
    """This process's view of the run's membership, through the launcher's store."""

    def __init__(self, store: Any, slot: int, slots: int, timeout: float, backend: str):
        self.store, self.slot, self.slots = store, slot, slots
        self.timeout, self.backend = timeout, backend
        self.me = Member(slot, own_id(), os.getpid())
        self.epoch = -1
        self.members: list[Member] = []
        self.joined_late = False
        self.writer = 0  # the slot that writes metrics and checkpoints (0 until it is lost)
        self.admitted = 0  # joins the leader has taken in (el/wants counts every join)
        self._graveyard: list[Any] = []  # broken groups, kept so no destructor blocks on them

    @classmethod
    def connect(cls, slot: int, slots: int, timeout: float, backend: str) -> Membership:
        membership = cls(_client(timeout), slot, slots, timeout, backend)
        beat = threading.Thread(target=_beat, args=(membership.me.uid, timeout), daemon=True)
        beat.start()
        return membership

    def stalled(self, member: Member) -> bool:
        """Its process has not beaten for ``STALE`` s (``_beat``; a stopped process does not;
        one busy in a long collective or an evaluation does)."""
        key = f"el/hb/{member.uid}"
        if not self.store.check([key]):
            return False  # not started beating yet
        return time.time() - float(self.store.get(key).decode()) > STALE

    # ---- who is in --------------------------------------------------------------------------
    @property
    def index(self) -> int:
        return self.members.index(self.me)

    @property
    def leader(self) -> bool:
        return self.index == 0

    def join(self) -> None:
        """Say this process wants in; wait until an epoch takes it (the first: all slots)."""
        self.store.set(f"el/want/{self.slot}", str(self.me))
        self.store.add("el/wants", 1)
        if os.environ.get(JOIN_ENV):
            self.joined_late = True
            key = f"el/admit/{self.me}"
            patience = max(60.0, 3 * self.timeout)
            while not self.store.check([key]):
                if self.store.check(["el/finished"]):
                    raise RankDropped(f"slot {self.slot}: the run finished before it could join")
                beat = float(self.store.get("el/beat").decode())
                if time.time() - beat > patience:
                    raise PeerFailure(
                        f"slot {self.slot}: waited to join, but no member has finished an "
                        f"iteration for {patience:g} s; the run is not making progress"
                    )
                time.sleep(POLL * 5)
            epoch = int(self.store.get(key).decode())
            self._enter(epoch)
            self.admitted = int(self.store.get(f"el/{epoch}/wants").decode())
            self.writer = int(self.store.get(f"el/{epoch}/writer").decode())
            started = float(os.environ.get("DISTRL_ELASTIC_STARTED", "nan"))
            print(
                f"elastic: slot {self.slot} (pid {self.me.pid}) joined epoch {self.epoch} "
                f"{time.time() - started:.2f} s after it became the slot's replacement",
                file=sys.stderr,
                flush=True,
            )
            return
        keys = [f"el/want/{s}" for s in range(self.slots)]
        try:
            self.store.wait(keys, datetime.timedelta(seconds=max(self.timeout, START_WAIT)))
        except RuntimeError as e:  # (DistStoreError) a node never started
            missing = [s for s, k in enumerate(keys) if not self.store.check([k])]
            raise PeerFailure(
                f"slot {self.slot}: slots {missing} did not start within {START_WAIT:g} s; "
                f"start every node's launcher (--nnodes, --node-rank)"
            ) from e
        first = [_parse(self.store.get(k).decode())[0] for k in keys]
        self.store.compare_set("el/0/members", "", _text(first))
        self.store.set("el/beat", f"{time.time():.3f}")
        self.admitted = self.slots
        self._enter(0)

    def _enter(self, epoch: int) -> None:
        """Form epoch ``epoch``'s process group (the default group of this process)."""
        members = _parse(self.store.get(f"el/{epoch}/members").decode())
        if self.me not in members:
            raise RankDropped(f"slot {self.slot}: left out of epoch {epoch}")
        self._drop_group()
        self.epoch, self.members = epoch, members
        try:
            dist.init_process_group(
                backend=self.backend,
                store=dist.PrefixStore(f"el/pg/{epoch}", self.store),
                rank=self.index,
                world_size=len(members),
                timeout=datetime.timedelta(seconds=self.timeout),
            )
        except RuntimeError as e:  # a member died before it arrived (DistStoreError)
            raise PeerFailure(
                f"slot {self.slot}: epoch {epoch}'s group did not form: "
                f"{str(e).splitlines()[0][:200]}"
            ) from e

    def _drop_group(self) -> None:
        """Leave the current group (aborted, and the object kept alive, so that no destructor
        waits on a stopped peer). A dead peer's ring neighbours fail at once; a survivor
        blocked on a live one fails after --dist.timeout (Gloo's own), and votes then."""
        if dist.is_initialized():
            group = dist.distributed_c10d._get_default_group()
            self._graveyard.append(group)
            with contextlib.suppress(Exception):
                group.abort()
            with contextlib.suppress(Exception):
                dist.destroy_process_group()

    # ---- joins ------------------------------------------------------------------------------
    def joins_waiting(self) -> bool:
        """Leader only: a process asked to join since the last admission (one store read)."""
        if not self.leader:
            return False
        self.store.set("el/beat", f"{time.time():.3f}")
        return int(self.store.add("el/wants", 0)) > self.admitted

    def source(self) -> int:
        """Index, in this epoch's group, of the member whose state the others take when it
        was formed by an admission: the previous epoch's leader (a newcomer may sort first)."""
        slot = int(self.store.get(f"el/{self.epoch}/source").decode())
        return next(i for i, m in enumerate(self.members) if m.slot == slot)

    def admit(self) -> int:
        """Every member, at the iteration boundary all agreed on: the leader writes the next
        epoch (the members plus each slot's newest process that is not in), the others wait
        for it; everyone forms it. Returns how many joined."""
        nxt = self.epoch + 1
        key = f"el/{nxt}/members"
        if self.leader:
            wants = int(self.store.add("el/wants", 0))
            slots = {m.slot for m in self.members}
            new = []
            for s in range(self.slots):
                k = f"el/want/{s}"
                if s not in slots and self.store.check([k]):
                    (member,) = _parse(self.store.get(k).decode())
                    if not self.store.check([f"el/dead/{member.uid}"]):  # (it asked, then died)
                        new.append(member)
            members = sorted(self.members + new, key=lambda m: m.slot)
            self.store.set(f"el/{nxt}/wants", str(wants))
            self.store.set(f"el/{nxt}/source", str(self.slot))
            self.store.set(f"el/{nxt}/writer", str(self.writer))
            self.store.compare_set(key, "", _text(members))
            for m in new:
                self.store.set(f"el/admit/{m}", str(nxt))
        self.store.wait([key], datetime.timedelta(seconds=max(self.timeout, 30.0)))
        self.admitted = int(self.store.get(f"el/{nxt}/wants").decode())  # the next leader's too
        before = len(self.members)
        self._enter(nxt)
        return len(self.members) - before

    # ---- failures ---------------------------------------------------------------------------
    def wait(self, work: Any) -> None:
        """Wait for one collective of this epoch, watching the store: when another member
        has already found the epoch broken (``el/<e>/broken``), or a member's beat is stale,
        raise at once instead of waiting for Gloo's timeout (a dead peer's ring neighbours
        fail at once; the others would otherwise block on a live neighbour until then)."""
        broken = f"el/{self.epoch}/broken"
        t0 = time.monotonic()
        next_check, nap = t0 + 0.05, 0.0
        while not work.is_completed():
            now = time.monotonic()
            if now >= next_check:
                next_check = now + 0.05
                if self.store.check([broken]):
                    raise RuntimeError(f"epoch {self.epoch}: another member found a peer lost")
                if now - t0 > STALE:
                    stale = [m for m in self.members if m != self.me and self.stalled(m)]
                    if stale:
                        raise RuntimeError(
                            f"epoch {self.epoch}: no beat from {', '.join(map(str, stale))} "
                            f"for {STALE:g} s (slot:id:pid)"
                        )
            time.sleep(nap)
            nap = min(1e-3, nap + 1e-4)
        work.wait()  # raises the backend's error, if it failed

    def regroup(self, committed: int) -> tuple[int, list[Member]]:
        """After a failed collective: vote with the iteration this rank holds, agree on the
        survivors, form their group. Returns the index (in the new group) of the member whose
        state everyone takes, and the members left out."""
        self._drop_group()
        e = self.epoch
        self.store.set(f"el/{e}/broken", "1")  # the others stop waiting on their collectives
        self.store.set(f"el/{e}/vote/{self.slot}", f"{self.me.uid} {committed}")
        key = f"el/{e + 1}/members"
        # a live survivor may learn of the failure only when its own collective times out
        # (--dist.timeout): wait past that for its vote; the dead are marked by the launcher
        deadline = time.monotonic() + 2 * self.timeout + 5.0
        while not self.store.check([key]):
            votes = self._votes(e)
            dead = [
                m
                for m in self.members
                if m not in votes and (self.store.check([f"el/dead/{m.uid}"]) or self.stalled(m))
            ]
            settled = all(m in votes or m in dead for m in self.members)
            if settled or time.monotonic() > deadline:
                survivors = [m for m in self.members if m in votes]
                self.store.compare_set(key, "", _text(survivors))
                break
            time.sleep(POLL)
        survivors = _parse(self.store.get(key).decode())
        lost = [m for m in self.members if m not in survivors]
        if survivors and all(m.slot != self.writer for m in survivors):  # the same on each
            self.writer = min(m.slot for m in survivors)
        for m in lost:
            self.store.set(f"el/out/{m.uid}", str(e + 1))
        votes = self._votes(e)
        self._enter(e + 1)
        held = [(votes[m], -m.slot) for m in self.members]
        return held.index(max(held)), lost

    def _votes(self, epoch: int) -> dict[Member, int]:
        out = {}
        for m in self.members:
            k = f"el/{epoch}/vote/{m.slot}"
            if self.store.check([k]):
                uid, it = map(int, self.store.get(k).decode().split())
                if uid == m.uid:
                    out[m] = it
        return out

    def finish(self) -> None:
        """The run is over: a replacement still waiting to join leaves."""
        with contextlib.suppress(Exception):
            self.store.set("el/finished", "1")


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

    # ---- one iteration, kept whole ------------------------------------------------------------
    def iterate(self, runner: Runner) -> dict[str, Any]:
        """``runner.iterate()``; a failure of a peer inside it is survived: the iteration is
        discarded (or kept, where this rank's update had completed) and the survivors go on
        from the state of the one holding the newest iteration. At the boundary where the
        members agreed a process waits to join, it joins and receives that state."""
        if self._sync_pending:
            self._sync_state(runner, self.membership.source())
            self._sync_pending = False
            runner.message(
                f"elastic: slot {self.ctx.rank} joined at epoch {self.membership.epoch}, "
                f"iteration {runner.iteration}, state from slot "
                f"{self.membership.members[self.membership.source()].slot}"
            )
            if runner.done:
                return {}
        snap = _snapshot(runner)
        try:
            record = runner.iterate()
            if self._joining and not runner.done:  # (done is agreed: the same on every member)
                self._admit(runner)
        except RankDropped:
            raise
        except PeerFailure as e:
            return self._survive(runner, snap, e)
        return record

    def _admit(self, runner: Runner) -> None:
        self._joining = False
        t0 = time.perf_counter()
        added = self.membership.admit()
        self._follow()
        self.joins += added  # (before the sync, which carries the counts to the newcomer)
        self._sync_state(runner, self.membership.source())
        runner.message(
            f"elastic: {added} rank(s) joined at iteration {runner.iteration}: "
            f"{len(self.membership.members)} members, epoch {self.membership.epoch} "
            f"({time.perf_counter() - t0:.2f} s)"
        )

    def _survive(self, runner: Runner, snap: dict[str, Any], error: PeerFailure) -> dict:
        t0 = time.perf_counter()
        self._joining = False  # the note of a failed iteration is void; the leader asks again
        if runner.iteration == snap["iteration"]:  # the update did not complete here
            _restore(runner, snap)
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
            runner.take_over_writing()
        if self.is_main:  # an iteration kept whose writer died, or rolled back, before logging
            runner.log_held_iteration()
        runner.strategy.take_times()
        what = ", ".join(f"slot {m.slot} (pid {m.pid})" for m in lost) or "none"
        runner.message(
            f"elastic: lost {what} at iteration {runner.iteration}; {self.world_size} ranks go "
            f"on from epoch {self.membership.epoch} in {time.perf_counter() - t0:.2f} s "
            f"({str(error).splitlines()[0][:160]})"
        )
        try:
            self._checkpoint_held(runner)
        except PeerFailure as again:  # another member lost while saving: survive that too
            return self._survive(runner, _snapshot(runner), again)
        return {}

    def _checkpoint_held(self, runner: Runner) -> None:
        """The held iteration's checkpoint, where one was due (its interval, or the run's
        end): the writer may have died before or while it wrote it. Every member takes part,
        as in the iteration; where the checkpoint had been written, it is written again."""
        rec = runner.last_record
        if rec is None or rec.get("iteration") != runner.iteration or not runner.checkpoint_due():
            return
        runner.checkpoint(float(rec["wall_time"]), int(rec.get("train/skipped_updates") or 0))

    def _sync_state(self, runner: Runner, src: int) -> None:
        """Member ``src``'s learner state to every member (one broadcast of its bytes)."""
        if self.rank == src:
            buf = io.BytesIO()
            counts = torch.tensor([self.failures, self.joins])  # the run's, not this process's
            record = json.dumps(to_jsonable(runner.last_record))  # a writer may lack it
            torch.save({**_snapshot(runner), "record": record, "elastic/counts": counts}, buf)
            data = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)
            size = torch.tensor([data.numel()], dtype=torch.int64)
        else:
            size = torch.zeros(1, dtype=torch.int64)
        self._timed(dist.broadcast, size, src=src, sync=False)
        if self.rank != src:
            data = torch.empty(int(size.item()), dtype=torch.uint8)
        self._timed(dist.broadcast, data, src=src, sync=False)
        if self.rank != src:
            state = torch.load(io.BytesIO(data.numpy().tobytes()), weights_only=True)
            self.failures, self.joins = map(int, state.pop("elastic/counts").tolist())
            state["record"] = json.loads(state["record"])
            _restore(runner, state)

    def finish(self) -> None:
        if self.membership.leader:
            self.membership.finish()


def _snapshot(runner: Runner) -> dict[str, Any]:
    """Everything the members hold alike: weights, the algorithm's state (optimizer,
    normalizers), the iteration and the env-step count (copies), and that iteration's record
    (as it is: logged, it no longer changes)."""
    state = {
        "policy": runner.policy.state_dict(),
        **runner.algorithm_state(),
        "iteration": runner.iteration,
        "env_steps": runner.env_steps,
    }
    copied: dict[str, Any] = _copy(state)
    copied["record"] = runner.last_record
    return copied


def _copy(obj: Any) -> Any:
    """A deep copy; tensors by ``clone`` (``copy.deepcopy`` took 70 ms for cartpole's ~9k
    parameters and their Adam state here: a tenth of an iteration)."""
    if torch.is_tensor(obj):
        return obj.detach().clone()
    if isinstance(obj, dict):
        return {k: _copy(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_copy(v) for v in obj)
    return copy.deepcopy(obj)


def _restore(runner: Runner, state: dict[str, Any]) -> None:
    runner.policy.load_state_dict(state["policy"])
    runner.load_algorithm_state(state)
    runner.iteration = int(state["iteration"])
    runner.last_record = state["record"]


_membership: Membership | None = None


def stand_by() -> bool:
    """The launcher's spare: import what a rank needs and connect to the store now, then wait
    until the launcher gives this process a lost slot (``el/standby/<id>``) and become that
    slot's replacement (its environment as the launcher would have started it). A replacement
    then joins in about an iteration instead of paying the imports (seconds) after a failure.
    False: the run finished first. (The caller has made the imports a rank needs.)"""
    store = _client(60.0)
    key = f"el/standby/{own_id()}"
    store.set(f"el/standby-ready/{own_id()}", "1")
    while not store.check([key]):
        if store.check(["el/finished"]):
            return False
        time.sleep(POLL * 5)
    slot, local, given = store.get(key).decode().split()
    os.environ.pop(STANDBY_ENV)
    os.environ.update(RANK=slot, LOCAL_RANK=local, ROLE_RANK=slot)
    os.environ[JOIN_ENV] = "1"
    os.environ["DISTRL_ELASTIC_STARTED"] = given  # when the launcher gave it the slot
    return True


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
