"""Elastic's membership: who is in the run, through the elastic launcher's store.

Each *epoch* is one membership (a list of ``slot:id:pid``, the id unique in the run) and one
Gloo process group made from a ``PrefixStore`` of that epoch; ``Membership`` joins, admits
replacements at an agreed boundary and regroups the survivors after a failed collective (the
protocol is ``elastic.py``'s docstring). Apart from the strategy (``elastic.py``), which keeps
an iteration whole around it.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

from distrl.distributed.liveness import JoinRefused, PeerFailure, RankDropped
from distrl.distributed.store_secret import guard, raw
from distrl.distributed.transport import install_difference, install_identity

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
    store = dist.TCPStore(
        host,
        int(port),
        is_master=False,
        timeout=datetime.timedelta(seconds=max(timeout, 30.0)),
        use_libuv=True,
    )
    return guard(store)  # values signed with the run's secret (store_secret)


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
        self.refused: list[str] = []  # leader: replacements left out, and why (install_refused)
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
        late = bool(os.environ.get(JOIN_ENV))
        if late:  # the members check it runs their install (the first members check each other)
            self.store.set(f"el/install/{self.me.uid}", json.dumps(install_identity()))
        self.store.set(f"el/want/{self.slot}", str(self.me))
        self.store.add("el/wants", 1)
        if late:
            self.joined_late = True
            key, refused = f"el/admit/{self.me}", f"el/refused/{self.me}"
            patience = max(60.0, 3 * self.timeout)
            while not self.store.check([key]):
                if self.store.check([refused]):
                    raise JoinRefused(
                        f"slot {self.slot} (pid {self.me.pid}): not admitted to the run: its "
                        f"{self.store.get(refused).decode()}; install the same distrl and torch "
                        f"as the run's, then start it again"
                    )
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
                store=dist.PrefixStore(f"el/pg/{epoch}", raw(self.store)),  # torch's keys
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
                    dead = self.store.check([f"el/dead/{member.uid}"])  # (it asked, then died)
                    if not dead and not self.install_refused(member):
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

    def install_refused(self, member: Member) -> bool:
        """Leader: ``member``, a replacement, runs another install than the members (the check
        every rank passes at the start, ``Collectives.check_install``, which a replacement
        skips): it is told why (``el/refused/<member>``) and left out (True)."""
        key = f"el/install/{member.uid}"
        theirs = json.loads(self.store.get(key).decode()) if self.store.check([key]) else {}
        why = install_difference(install_identity(), theirs)
        if why is None:
            return False
        refused = f"el/refused/{member}"
        if not self.store.check([refused]):
            self.store.set(refused, f"install differs from the members' ({why})")
            self.refused.append(
                f"slot {member.slot} (pid {member.pid}) not admitted as a replacement: its "
                f"install differs from the members' ({why}); the run goes on without it"
            )
        return True

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
