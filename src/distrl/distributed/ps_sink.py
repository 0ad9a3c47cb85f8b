"""A parameter server's sink node (``--dist.ps.group-size G``: the first rank of every group of
G ranks but rank 0's), MALib's local sink node: to its workers it is their server, to the
server one peer. A coordinator of its workers and a peer of the server on the peer layer
(``distributed/peers.py``) at once, waiting on one queue that both inboxes fill. The scheme is
``param_server.py``'s; the sink keeps no parameters and takes no decision.

Up, once every live worker of its group has sent its part (its rounds are synchronous whatever
the strategy's mode; the mode holds across the server's peers):

- a round of gradients: their sample-weighted mean (``mean_gradient``) as one gradient of their
  summed samples, at the oldest version among them (the server's staleness counts from it);
- a statistics round: their rows stacked after their ranks (``stack_rows``), so the server
  absorbs each worker's row as it would without a sink;
- a checkpoint's states: one message of their states by rank;
- DONE once all of them are done.

Down: every message of the server, as it came (a server header names no receiver), to each live
worker it concerns; BYE to every worker last.

A worker that breaks a rule or stays silent while its group's round waits for it is dropped by
name (ps-bsp stops the run, as the server would). A sink the server dropped releases its
workers before it leaves, so they exit as dropped workers do.
"""

from __future__ import annotations

import queue
import sys
import time
from typing import Any

import torch

from distrl import interrupts
from distrl.algorithms.ppo import Decision
from distrl.distributed.base import RELAY, Role, StatsLayout
from distrl.distributed.liveness import PeerFailure, RankDropped, dropped_reason, release_dropped
from distrl.distributed.messages import ServerHeader, WorkerHeader
from distrl.distributed.param_server import (
    BYE,
    DONE,
    GRAD,
    PARAMS,
    SERVER,
    STATE,
    STATS,
    STATS_REPLY,
    PSRank,
    mean_gradient,
    worker_message_error,
)
from distrl.distributed.peers import Coordinator, Peer, PeerLost
from distrl.distributed.transport import (
    Inbox,
    bytes_payload,
    coordinator_wait,
    from_bytes_payload,
    pack64,
    receiver,
    unpack64,
)


def stack_rows(rows: dict[int, torch.Tensor]) -> torch.Tensor:
    """Statistics rows by rank as one float64 vector: the ranks, then the rows in rank order
    (``PSServer._rows`` reads it back)."""
    ranks = sorted(rows)
    head = torch.tensor([float(r) for r in ranks], dtype=torch.float64)
    return torch.cat([head, *(rows[r] for r in ranks)])


def unstack_rows(
    flat: torch.Tensor, nsums: int, layout: StatsLayout | None, members: list[int]
) -> tuple[dict[int, torch.Tensor], str | None]:
    """``stack_rows`` read back on the server: the rows by rank, or ({}, why not) where the
    sums, the row width, or the ranks (sorted, unique, of ``members``) are not a sink's."""
    width = layout.numel if layout is not None else 0
    if layout is not None and nsums != layout.num_sums:
        return {}, f"statistics of {nsums} sums, not {layout.num_sums}"
    if not width or not flat.numel() or flat.numel() % (width + 1):
        words = 2 * flat.numel()
        return {}, f"stacked statistics of {words} words, not rows of {width} under a rank"
    k = flat.numel() // (width + 1)
    ranks = [int(r) for r in flat[:k].tolist()]
    if ranks != sorted(set(ranks)) or not set(ranks) <= set(members):
        return {}, f"statistics of ranks {ranks}, not of its workers {members}"
    return dict(zip(ranks, flat[k:].reshape(k, width), strict=True)), None


def states_by_rank(state: Any, members: list[int]) -> dict[int, Any] | None:
    """A sink's state message read back on the server: its workers' states by rank, or None
    when it is not a dict of its workers' ranks."""
    if not isinstance(state, dict) or not set(state) <= set(members):
        return None
    return dict(state)


class PSSink(PSRank):
    """``--dist.strategy ps-*`` with ``--dist.ps.group-size``: ``relay`` is the sink's loop,
    ``release`` its end."""

    role = Role(RELAY)

    layout: StatsLayout | None = None
    """What every worker's statistics row holds (``relay``)."""

    def start(self) -> None:
        self.members = self.tree.members(self.rank)
        q: queue.Queue = queue.Queue()  # both inboxes: one wait covers both
        self.queue = q
        down = WorkerHeader.size() + self.capacity
        up = ServerHeader.size() + self.capacity
        self.peers = Coordinator(
            title=f"sink node rank {self.rank}",
            noun="worker",
            peers=self.members,
            header=WorkerHeader,
            kinds=(STATS, GRAD, STATE, DONE),
            done_kind=DONE,
            capacity=self.capacity,
            group_of=lambda w: self.pair(w, self.rank),
            timeout=self.timeout,
            version=lambda: self.version,
            check=self._check,
            on_drop=self._on_drop,
            inbox=Inbox(
                self.members,
                down,
                DONE,
                receiver(down, lambda w: self.pair(w, self.rank)),
                into=self.queue,
            ),
        )
        self.up = Peer(
            label=f"sink node rank {self.rank}/{self.world_size}",
            name_of=lambda c: "the parameter server (rank 0)",
            coordinators=[SERVER],
            inbox=Inbox([SERVER], up, BYE, receiver(up, lambda c: self.pair(self.rank)), into=q),
            capacity=self.capacity,
            group_of=lambda c: self.pair(self.rank),
            timeout=self.timeout,
            rank=self.rank,
        )

    def step(self, learner: Any, flat: torch.Tensor) -> Decision:
        raise TypeError("a sink node steps nothing: it passes its workers' gradients up")

    # ---- the rules of a worker's message ----------------------------------------------------
    def _check(self, head: WorkerHeader, payload: torch.Tensor) -> str | None:
        return worker_message_error(head.kind, head.nsums, payload, self.num_grad, self.layout)

    def _on_drop(self, worker: int, why: str) -> None:
        if self.mode == "bsp":
            raise PeerFailure(
                f"sink node rank {self.rank}/{self.world_size} (ps-bsp): worker rank {worker} "
                f"lost at iteration {self.peers.completed.get(worker, 0)}: {why}. BSP needs "
                f"every worker; ps-asp and ps-bap go on without it"
            )

    # ---- the loop ----------------------------------------------------------------------------
    def relay(self, start_iteration: int, layout: StatsLayout | None = None) -> None:
        self.layout = layout
        peers = self.peers
        peers.completed = dict.fromkeys(self.members, start_iteration)
        peers.heard_now()
        self.grads: dict[int, dict[int, tuple[torch.Tensor, int, int]]] = {}  # round -> worker
        self.next_round = dict.fromkeys(self.members, 0)
        self.sent_rounds = 0  # rounds < sent_rounds went up
        self.rows: dict[int, tuple[torch.Tensor, int, int]] = {}  # worker -> row, nsums, it
        self.replies_to: list[int] = []  # whose rows the server's next statistics reply answers
        self.states: dict[int, dict[int, Any]] = {}  # iteration -> worker -> state
        self.latest: dict[int, Any] = {}
        self.done_sent = False
        self.owed_since = time.perf_counter()  # when the server last answered (or the start)
        self.owed = False  # something went up that the server has not answered yet
        while True:
            got = self._get()
            if got is None:
                self._check_silence()
                continue
            peer, msg = got
            if peer == SERVER:
                if self._from_server(*self.up.accept(peer, msg)):
                    return
            else:
                m = peers.accept(peer, msg)
                if m is not None:
                    self._from_worker(m.peer, m.header, m.payload)
            self._pass_up()
            self._say(peers.take_messages())

    def release(self) -> list[str]:
        """Its last lines and those of workers that did not leave, said here (a sink's
        runner keeps no log)."""
        self._say(self.peers.release())
        return []

    @staticmethod
    def _say(lines: list[str]) -> None:
        """What a sink has to say goes to its own stderr (only rank 0 keeps the run's log)."""
        for line in lines:
            print(f"distrl: {line}", file=sys.stderr, flush=True)

    def _get(self) -> tuple[int, torch.Tensor | Exception] | None:
        try:
            return self.queue.get(timeout=1.0)
        except queue.Empty:
            return None

    def _check_silence(self) -> None:
        """Nothing came for a second: drop a worker its group's open round has waited for past
        ``--dist.timeout``; name the server when it has not answered for ``coordinator_wait``;
        leave, releasing the workers, when the server dropped this sink."""
        waiting = self.peers.live - self.peers.done
        open_round = self.grads.get(self.sent_rounds, {})
        owing = waiting - set(open_round) if open_round else set()
        if self.rows:
            owing |= waiting - set(self.rows)
        self.peers.drop_silent(owing)
        if not self.owed:
            return
        silent = time.perf_counter() - self.owed_since
        if silent > self.timeout:
            why = dropped_reason(self.rank)
            if why is not None:
                gone = f"its sink node (rank {self.rank}) was dropped: {why}"
                release_dropped(dict.fromkeys(self.peers.live, gone), coordinator_wait(1.0))
                raise RankDropped(f"sink node rank {self.rank}: dropped from the run: {why}")
        if silent > coordinator_wait(self.timeout):
            raise PeerFailure(
                f"sink node rank {self.rank}/{self.world_size}: nothing from the parameter "
                f"server (rank 0) for {silent:.0f} s (2 x --dist.timeout + 5); it died or stalled"
            )

    # ---- from the workers --------------------------------------------------------------------
    def _from_worker(self, worker: int, head: WorkerHeader, payload: torch.Tensor) -> None:
        if head.signal:  # passed up with the next message: the server stops the run
            self.interrupt = interrupts.merge(self.interrupt, head.signal)
        if head.kind == GRAD:
            k = self.next_round[worker]
            self.next_round[worker] = k + 1
            self.grads.setdefault(k, {})[worker] = (payload, head.samples, head.version)
        elif head.kind == STATS:
            self.peers.completed[worker] = head.iteration
            self.rows[worker] = (unpack64(payload), head.nsums, head.iteration)
        elif head.kind == STATE:
            state = self.latest[worker] = from_bytes_payload(payload)
            self.states.setdefault(head.iteration, {})[worker] = state
        elif head.kind == DONE:
            self.peers.completed[worker] = head.iteration

    def _pass_up(self) -> None:
        """Send up every round, statistics round, checkpoint and DONE its group completed."""
        waiting = self.peers.live - self.peers.done
        while self.sent_rounds in self.grads and set(self.grads[self.sent_rounds]) >= waiting:
            got = self.grads.pop(self.sent_rounds)
            self.sent_rounds += 1
            if not got:
                continue
            workers = sorted(got)
            flat = mean_gradient([got[w][:2] for w in workers])
            samples = sum(got[w][1] for w in workers)
            version = min(got[w][2] for w in workers)
            self._up(GRAD, flat, version=version, samples=samples)
        if self.rows and set(self.rows) >= waiting:
            rows = {w: r for w, (r, _, _) in self.rows.items()}
            nsums = next(iter(self.rows.values()))[1]
            iteration = min(it for _, _, it in self.rows.values())
            self.replies_to, self.rows = sorted(rows), {}
            self._up(STATS, pack64(stack_rows(rows)), iteration=iteration, nsums=nsums)
        live, done = self.peers.live, self.peers.done
        for it in sorted(self.states):
            have = self.states[it]
            stand_in = {w: self.latest[w] for w in live & done if w not in have}
            if set(have) | set(stand_in) >= live:
                states = stand_in | self.states.pop(it)
                self._up(STATE, bytes_payload(states), iteration=it)
        if not self.done_sent and live and live <= done:
            self.done_sent = True
            last = min(self.peers.completed[w] for w in live)
            self._up(DONE, torch.zeros(1), iteration=last)

    def _up(self, kind: int, payload: torch.Tensor, **h: int) -> None:
        note = interrupts.merge(self.interrupt, interrupts.note())

        def header(part: int, parts: int, length: int) -> WorkerHeader:
            return WorkerHeader(
                kind,
                sender=self.rank,
                version=h.get("version", self.version),
                iteration=h.get("iteration", 0),
                samples=h.get("samples", 0),
                part=part,
                parts=parts,
                nsums=h.get("nsums", 0),
                signal=note,
                length=length,
            )

        if kind != STATE and not self.owed:  # the server answers each but a state
            self.owed, self.owed_since = True, time.perf_counter()
        self.up.send(SERVER, header, payload)

    # ---- from the server ---------------------------------------------------------------------
    def _from_server(self, _: int, msg: torch.Tensor) -> bool:
        """Pass the server's message down as it came; True after its BYE."""
        head = ServerHeader.read(msg)
        self.owed, self.owed_since = False, time.perf_counter()
        live = sorted(self.peers.live)
        if head.kind == PARAMS:
            self.version = head.version
            to = [w for w in live if w not in self.peers.done]
        elif head.kind == STATS_REPLY:
            to = [w for w in self.replies_to if w in self.peers.live]
        elif head.kind == BYE:
            to = live
        else:
            raise PeerFailure(
                f"sink node rank {self.rank}: the parameter server sent a message of unknown "
                f"kind {head.kind}"
            )
        lost: list[PeerLost] = []
        for w in to:
            try:
                self.peers.send_raw(w, msg)
            except PeerLost as e:
                lost.append(e)
        for failure in lost:
            self.peers.drop(failure.peer, f"sending to it failed ({failure})")
        self.peers.heard_now()  # they were just sent what they wait for
        return head.kind == BYE
