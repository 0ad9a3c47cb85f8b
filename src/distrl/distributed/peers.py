"""The peer layer: one coordinator and its peers, whatever they send each other.

Every point-to-point scheme of distrl is a coordinator with peers: a parameter server and its
workers (or sink nodes), a sink node and its workers, a learner and its actors (Ape-X's actors
fill its replay). What they send differs (each side's scheme: ``ps_server.py``, ``ps_sink.py``,
``ps_worker.py``, ``learner.py``, ``actor.py``); how a
message travels, what a coordinator trusts of it and what happens to a peer that breaks the
rules does not, and is written here once:

- ``Coordinator``: one inbox of fixed-size framed messages from its peers (a receiver thread
  each, ``transport.Inbox``); every message checked before it is acted on (``read_checked``,
  a version ahead of the coordinator's, the scheme's own ``check``); multi-part payloads
  reassembled in order and within ``MAX_WORDS``; when each peer was last heard from, and a
  silent one past ``--dist.timeout`` dropped; DONE noted; a dropped peer named once, in the
  store and in the run's messages, and woken to leave (``release``).
- ``Peer``: framed sends to a coordinator naming it when the send fails, waits on one or more
  coordinators that name the silent or lost one, and the DONE/BYE handshake's wait.

A process may hold a ``Peer`` towards one coordinator and a ``Coordinator`` of its own peers at
once (a sink node). A coordinator never crashes on what a peer sends: a bad message drops its
sender by name and the run goes on with the others (or stops naming it, where the scheme
cannot go on without every peer, as ps-bsp).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from distrl import interrupts
from distrl.distributed.liveness import PeerFailure, release_dropped
from distrl.distributed.messages import Header
from distrl.distributed.transport import (
    Inbox,
    coordinator_wait,
    framed_parts,
    receiver,
    send,
)

H = TypeVar("H", bound=Header)

MAX_WORDS = 1 << 28
"""The largest payload (float32 words: 1 GiB) a coordinator reassembles from one peer's parts;
a peer that announces more is dropped before its parts can grow the coordinator's memory."""


class PeerLost(PeerFailure):
    """A coordinator could not send to one of its peers."""

    def __init__(self, peer: int, message: str):
        super().__init__(message)
        self.peer = peer


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def read_checked(
    cls: type[H], msg: torch.Tensor, peer: int, capacity: int, kinds: Collection[int]
) -> tuple[H | None, str | None]:
    """(header, None) for a message a coordinator can act on, else (None, why not): a header
    that does not parse, an unknown kind, a sender other than the peer it came from, a part
    outside ``0 <= part < parts``, a payload length outside ``0..capacity``, any other
    negative count, or a ``signal`` that is no note a rank sends (``interrupts.NOTES``). A
    coordinator drops the peer by name instead of crashing on it."""
    try:
        header = cls.read(msg)
    except (ValueError, OverflowError) as e:  # NaN or Inf where an integer belongs
        return None, f"an unreadable header ({e})"
    if header.kind not in kinds:
        return None, f"a message of unknown kind {header.kind}"
    sender = getattr(header, "sender", peer)
    if sender != peer:
        return None, f"a message claiming to come from rank {sender}"
    part, parts = getattr(header, "part", 0), getattr(header, "parts", 1)
    if not 0 <= part < parts:
        return None, f"part {part} of {parts}"
    length = getattr(header, "length", 0)
    if not 0 <= length <= capacity:
        return None, f"a payload length of {length} words (0..{capacity} fit)"
    for f in dataclasses.fields(header):
        value = getattr(header, f.name)
        if isinstance(value, int) and value < 0:
            return None, f"a negative {f.name} ({value})"
    note = getattr(header, "signal", 0)
    if note not in interrupts.NOTES:
        return None, f"a signal field of {note} (not SIGINT, SIGTERM or a stop request)"
    return header, None


@dataclass
class Message:
    """One whole message from a peer: its (last part's) header and the payload, parts joined."""

    peer: int
    header: Any
    payload: torch.Tensor


class Coordinator:
    """The coordinator side: its peers' messages, checked, whole, one at a time (``receive``),
    sends to one peer (``send``, ``send_raw``), and every peer's standing (``live``, ``done``,
    ``dropped``, ``last_seen``, ``completed``)."""

    def __init__(
        self,
        *,
        title: str,
        noun: str,
        peers: list[int],
        header: type[Header],
        kinds: tuple[int, ...],
        done_kind: int,
        capacity: int,
        group_of: Callable[[int], Any],
        timeout: float,
        version: Callable[[], int],
        check: Callable[[Any, torch.Tensor], str | None] = lambda head, payload: None,
        on_drop: Callable[[int, str], None] = lambda peer, why: None,
        max_words: int = MAX_WORDS,
        inbox: Inbox | None = None,
    ):
        """``title`` names the coordinator in what it says ("parameter server"), ``noun`` its
        peers ("worker"); ``version()`` is the newest version it holds (a peer cannot be
        ahead of it); ``check(header, payload)`` is the scheme's own rule for a whole message
        (why it cannot be used, or None); ``on_drop(peer, why)`` runs before a peer is dropped
        and may raise to stop the run instead (a scheme that needs every peer). ``inbox``: where
        messages arrive (default: a receiver thread per peer in its pair group)."""
        self.title, self.noun, self.header = title, noun, header
        self.kinds, self.done_kind, self.capacity = kinds, done_kind, capacity
        self.group_of, self.timeout, self.version = group_of, timeout, version
        self.check, self.on_drop, self.max_words = check, on_drop, max_words
        self.peers = list(peers)
        self.live = set(peers)
        self.done: set[int] = set()
        self.dropped: dict[int, str] = {}  # peer -> why (told to it when it asks the store)
        self.messages: list[str] = []  # what to say in the run's log, taken by the side
        self.completed = dict.fromkeys(peers, 0)  # the iteration each last finished
        self.last_seen = dict.fromkeys(peers, time.perf_counter())
        self.parts: dict[int, list[tuple[Any, torch.Tensor]]] = {p: [] for p in peers}
        self.wait = 0.0  # seconds spent waiting for a message (taken by the side)
        size = header.size() + capacity
        self.inbox = inbox or Inbox(self.peers, size, done_kind, receiver(size, group_of))

    # ---- receiving -------------------------------------------------------------------------
    def receive(self, timeout: float, suspects: Collection[int] | None = None) -> Message | None:
        """The next whole message of a live peer, or None: nothing came within ``timeout``
        (then any of ``suspects``, default every live peer not done, silent past
        ``--dist.timeout`` is dropped), a part of a longer message came, or the message broke a
        rule (its sender is dropped)."""
        t0 = time.perf_counter()
        got = self.inbox.get(timeout)
        self.wait += time.perf_counter() - t0
        if got is None:
            self.drop_silent(self.live - self.done if suspects is None else suspects)
            return None
        return self.accept(*got)

    def accept(self, peer: int, msg: torch.Tensor | Exception) -> Message | None:
        """What ``receive`` makes of one message its inbox got from ``peer`` (for a side that
        waits on its inbox's queue itself: a sink node)."""
        now = time.perf_counter()
        if isinstance(msg, Exception):
            self.drop(peer, f"its connection failed: {first_line(msg)}")
            return None
        self.last_seen[peer] = now
        if peer not in self.live:
            return None
        head, why = read_checked(self.header, msg, peer, self.capacity, self.kinds)
        version = getattr(head, "version", 0)
        if head is not None and version > self.version():
            why = f"version {version}, ahead of the {self.title}'s {self.version()}"
        whole: torch.Tensor | None = None
        if head is not None and why is None:
            whole, why = self._join(peer, head, self.header.payload(msg))
            if whole is None and why is None:
                return None  # more parts to come
        if whole is not None and why is None:
            why = self.check(head, whole)
        if head is None or whole is None or why is not None:
            self.drop(peer, f"it sent {why}")
            return None
        if head.kind == self.done_kind:
            self.done.add(peer)
        return Message(peer, head, whole)

    def _join(
        self, peer: int, head: Any, payload: torch.Tensor
    ) -> tuple[torch.Tensor | None, str | None]:
        """A one-part payload as it is (copied out of the receive buffer); a part of a longer
        one kept until its last part, which returns them joined. Parts must come in order, of
        one kind and count, and add up to at most ``max_words``."""
        parts = getattr(head, "parts", 1)
        if parts == 1 and not self.parts[peer]:
            return payload.clone(), None
        held = self.parts[peer]
        first = held[0][0] if held else head
        if head.part != len(held) or head.parts != first.parts or head.kind != first.kind:
            self.parts[peer] = []
            return None, (
                f"part {head.part} of {head.parts} (kind {head.kind}) where part {len(held)} "
                f"of {first.parts} (kind {first.kind}) was due"
            )
        if parts * self.capacity > self.max_words and parts > 1:
            self.parts[peer] = []
            return None, f"a message of {parts} parts, over {self.max_words} words"
        held.append((head, payload.clone()))
        if head.part < parts - 1:
            return None, None
        self.parts[peer] = []
        return torch.cat([p for _, p in held]), None

    def drop_silent(self, suspects: Collection[int]) -> None:
        """Drop each of ``suspects`` that sent nothing for longer than ``--dist.timeout``."""
        now = time.perf_counter()
        for p in sorted(set(suspects) & self.live):
            silent = now - self.last_seen[p]
            if silent > self.timeout:
                self.drop(p, f"it sent nothing for {silent:.1f} s (--dist.timeout)")

    def heard_now(self) -> None:
        """Every live peer's silence counts from now (they were just sent what they wait
        for, and are quiet until they answer it)."""
        now = time.perf_counter()
        for p in self.live:
            self.last_seen[p] = now

    def drop(self, peer: int, why: str) -> None:
        """Go on without ``peer``, naming it and why (once); raises when none is left."""
        if peer not in self.live:
            return
        it = self.completed.get(peer, 0)
        self.on_drop(peer, why)
        self.live.discard(peer)
        self.dropped[peer] = f"the {self.title} dropped it at iteration {it}: {why}"
        self.messages.append(
            f"{self.title}: dropped {self.noun} rank {peer} (last seen at iteration {it}): "
            f"{why}; training goes on with {self.noun}s {sorted(self.live)}"
        )
        if not self.live:
            raise PeerFailure(f"{self.title}: lost every {self.noun} ({self.peers})")

    # ---- sending ---------------------------------------------------------------------------
    def send(self, peer: int, header: Callable[[int, int, int], Header], payload: Any) -> int:
        """``payload`` to ``peer`` as framed messages (``header(part, parts, length)``);
        returns the bytes sent. Raises ``PeerLost`` naming the peer."""
        sent = 0
        for msg in framed_parts(payload, self.capacity, header):
            self.send_raw(peer, msg)
            sent += msg.numel() * 4
        return sent

    def send_raw(self, peer: int, t: torch.Tensor, tag: int = 0) -> None:
        """One tensor to ``peer``, as it is. Raises ``PeerLost`` naming the peer."""
        try:
            send(t, peer, self.group_of(peer), self.timeout, tag)
        except RuntimeError as e:
            raise PeerLost(
                peer, f"{self.title}: could not send to {self.noun} rank {peer}: {first_line(e)}"
            ) from e

    # ---- the end ---------------------------------------------------------------------------
    def take_messages(self) -> list[str]:
        out, self.messages = self.messages, []
        return out

    def release(self) -> list[str]:
        """After the run: what is left to say, then the dropped peers are told to leave (they
        exit 0 instead of holding torchrun's agent), a line for each that did not."""
        wait = coordinator_wait(self.timeout) + 5.0
        return self.take_messages() + [
            f"{self.title}: dropped {self.noun} rank {r} did not leave; the launcher waits for "
            f"it (end it with kill if it is stopped on another machine)"
            for r in release_dropped(self.dropped, wait)
        ]


class Peer:
    """The peer side: framed sends to a coordinator, and waits on one or more coordinators'
    messages, naming the one that was lost or went silent."""

    def __init__(
        self,
        *,
        label: str,
        name_of: Callable[[int], str],
        coordinators: list[int],
        inbox: Inbox,
        capacity: int,
        group_of: Callable[[int], Any],
        timeout: float,
        rank: int,
    ):
        """``label`` names this rank in what it says ("rank 2/3"); ``name_of(c)`` names a
        coordinator ("the parameter server (rank 0)")."""
        self.label, self.name_of, self.coordinators = label, name_of, coordinators
        self.inbox, self.capacity, self.group_of = inbox, capacity, group_of
        self.timeout, self.rank = timeout, rank

    def send(self, to: int, header: Callable[[int, int, int], Header], payload: Any) -> float:
        """``payload`` to coordinator ``to`` as framed messages; returns the seconds it took.
        Raises ``PeerFailure`` naming the coordinator."""
        t0 = time.perf_counter()
        for msg in framed_parts(payload, self.capacity, header):
            self.send_raw(to, msg)
        return time.perf_counter() - t0

    def send_raw(self, to: int, msg: torch.Tensor) -> None:
        try:
            send(msg, to, self.group_of(to), self.timeout)
        except RuntimeError as e:
            raise PeerFailure(
                f"{self.label}: lost {self.name_of(to)} while sending to it: {first_line(e)}"
            ) from e

    def next(self, block: bool) -> tuple[int, torch.Tensor] | None:
        """The next message from any coordinator: waiting for one (past ``coordinator_wait``
        the coordinators are named as died or stalled; a rank they dropped learns it and
        leaves, ``Inbox.wait``), or None at once when none is there and ``block`` is False."""
        wait = coordinator_wait(self.timeout)
        got = self.inbox.wait(wait, self.rank, self.timeout) if block else self.inbox.get(0.0)
        if got is None:
            if not block:
                return None
            names = " or ".join(self.name_of(c) for c in self.coordinators)
            raise PeerFailure(
                f"{self.label}: nothing from {names} for {wait:g} s (2 x --dist.timeout + 5); "
                f"it died or stalled"
            )
        return self.accept(*got)

    def accept(self, coordinator: int, msg: torch.Tensor | Exception) -> tuple[int, torch.Tensor]:
        """One message its inbox got from ``coordinator``; a failed connection raises
        ``PeerFailure`` naming it."""
        if isinstance(msg, Exception):
            raise PeerFailure(
                f"{self.label}: lost {self.name_of(coordinator)}: {first_line(msg)}"
            ) from msg
        return coordinator, msg
