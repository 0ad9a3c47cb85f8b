"""Point-to-point transport under the peer layer (``distributed/peers.py``): how bytes travel,
apart from who sends what when (each side's scheme) and what a coordinator trusts (the peer
layer).

- **Framing** (``distributed/messages.py``): a message is one fixed-size float32 tensor, a
  header then its payload; ``framed_parts`` cuts a payload longer than one message into parts,
  each framed with its part number.
- **Pair groups**: one process group per (coordinator, peer) pair, so a peer that stalls breaks
  only its own connection (``pair_groups``).
- **Inbox**: one receiver thread per peer blocking in ``recv`` and queueing what arrives, so the
  main loop waits with a deadline and a dead peer's closed connection names it. (Gloo's
  ``irecv().is_completed()`` never turned true here without ``wait()``, and a timed-out
  ``wait`` consumes the receive, so neither can poll.)
- **Sends with a deadline** (``send``): a plain Gloo send to a stopped peer waits forever once
  the socket buffer is full.
- **Words**: float64 rows and uint8 images as float32 words (``storage/words.py``,
  re-exported), and ``torch.save``d objects (``bytes_payload``), loaded back with
  ``weights_only=True``.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from distrl import version
from distrl.distributed.liveness import RankDropped, dropped_reason
from distrl.distributed.messages import (
    ActorHeader,
    Header,
    LearnerHeader,
    ServerHeader,
    WorkerHeader,
    frame,
    kind_of,
)
from distrl.storage.words import (  # re-exported: the words every message payload is made of
    pack64,
    pack_bytes,
    unpack64,
    unpack_bytes,
)

__all__ = [
    "Inbox",
    "bytes_payload",
    "coordinator_wait",
    "framed_parts",
    "from_bytes_payload",
    "install_mismatch",
    "install_signature",
    "pack64",
    "pack_bytes",
    "pair_groups",
    "receiver",
    "send",
    "unpack64",
    "unpack_bytes",
]


class Inbox:
    """One thread per peer blocking in ``recv`` of fixed-size messages; everything lands in one
    queue as ``(peer, message)``, or ``(peer, exception)`` when the peer's connection fails. A
    thread ends after its peer's ``last_kind`` message (an int or a tuple of kinds).
    ``receive(peer)`` replaces the fixed-size ``recv`` where one message is several receives
    (the learner-actor weight chunks). ``into``: a queue shared with another inbox, so that one
    wait covers both (a sink node's workers and its server)."""

    def __init__(
        self,
        peers: list[int],
        size: int,
        last_kind: int | tuple[int, ...],
        receive: Callable[[int], torch.Tensor] | None = None,
        into: queue.Queue | None = None,
    ):
        self.queue: queue.Queue = queue.Queue() if into is None else into
        last = last_kind if isinstance(last_kind, tuple) else (last_kind,)
        recv = receive or (lambda peer: _recv_fixed(peer, size, None))
        for peer in peers:
            t = threading.Thread(target=self._run, args=(peer, recv, last), daemon=True)
            t.start()

    def _run(self, peer: int, recv: Callable[[int], torch.Tensor], last: tuple) -> None:
        try:
            while True:
                msg = recv(peer)
                self.queue.put((peer, msg))
                if kind_of(msg) in last:
                    return
        except Exception as e:  # connection closed (peer died) or the backend's timeout
            self.queue.put((peer, e))

    def get(self, timeout: float) -> tuple[int, torch.Tensor | Exception] | None:
        try:
            return self.queue.get(timeout=max(timeout, 0.0))
        except queue.Empty:
            return None

    def wait(
        self, timeout: float, rank: int, silent: float
    ) -> tuple[int, torch.Tensor | Exception] | None:
        """``get`` for a worker or actor waiting on its coordinator. Past ``silent`` seconds
        (when the coordinator drops a silent peer) it checks every 2 s whether it dropped this
        rank (it had stalled, say), and then raises ``RankDropped`` at once instead of waiting
        out the timeout. (A check asks the store on rank 0: it blocks while rank 0 is stopped,
        so it is not made earlier.)"""
        t0 = time.perf_counter()
        deadline = t0 + timeout
        while True:
            now = time.perf_counter()
            step = deadline - now if now < t0 + silent else 2.0
            got = self.get(min(step, deadline - now))
            if got is not None or time.perf_counter() >= deadline:
                return got
            if time.perf_counter() < t0 + silent:
                continue
            why = dropped_reason(rank)
            if why is not None:
                raise RankDropped(f"rank {rank}: dropped from the run: {why}")


def _recv_fixed(peer: int, size: int, group: Any) -> torch.Tensor:
    msg = torch.empty(size)
    dist.recv(msg, src=peer, group=group)
    return msg


def coordinator_wait(timeout: float) -> float:
    """How long a worker (or actor) waits for its server (or learner) before naming it lost:
    the coordinator may itself spend up to ``timeout`` finding out that another peer stalled
    (a send to a stopped peer gives up only then), so a live peer must not give up at the same
    instant. The coordinator detects a silent peer after ``timeout``."""
    return 2.0 * timeout + 5.0


def pair_groups(a: list[int], b: list[int], timeout: float) -> dict[tuple[int, int], Any]:
    """One process group per (a, b) pair, for point-to-point messages between them. Every rank
    must call this with the same lists (group creation is collective).

    Why not the default group: with Gloo, a receive that times out on a silent (stopped) peer
    breaks the context it ran in, and with it the connections to every other peer of that
    context; the survivors then lost each other too. A pair's own context fails alone."""
    span = datetime.timedelta(seconds=coordinator_wait(timeout))  # the backend's own limit
    return {(x, y): dist.new_group([x, y], timeout=span) for x in a for y in b if x != y}


def receiver(size: int, group_of: Callable[[int], Any]) -> Callable[[int], torch.Tensor]:
    """An ``Inbox`` receive of fixed-size messages, each peer in its own pair group."""
    return lambda peer: _recv_fixed(peer, size, group_of(peer))


def to_parts(payload: torch.Tensor, capacity: int) -> list[torch.Tensor]:
    """Split a float32 payload into parts of at most ``capacity`` (at least one part)."""
    n = payload.numel()
    return [payload[i : i + capacity] for i in range(0, max(n, 1), capacity)]


def bytes_payload(obj: Any) -> torch.Tensor:
    """A checkpoint object as float32 words (torch.save bytes, zero-padded, length first)."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    raw = buf.getvalue()
    n = len(raw)
    padded = raw + b"\0" * (-n % 4)
    words = torch.frombuffer(bytearray(padded), dtype=torch.float32)
    return torch.cat([pack64(torch.tensor([float(n)], dtype=torch.float64)), words])


def from_bytes_payload(words: torch.Tensor) -> Any:
    """What ``bytes_payload`` packed, loaded with ``weights_only=True`` (tensors and plain
    containers only: a payload never makes this process import or run code)."""
    n = int(unpack64(words[:2])[0])
    raw = words[2:].contiguous().view(torch.uint8).numpy().tobytes()[:n]
    return torch.load(io.BytesIO(raw), weights_only=True)


def send(t: torch.Tensor, peer: int, group: Any, timeout: float, tag: int = 0) -> None:
    """``t`` to ``peer`` in ``group``, giving up (a ``RuntimeError``) after ``timeout`` s."""
    work = dist.isend(t.contiguous(), dst=peer, tag=tag, group=group)
    assert work is not None  # None only for a rank outside the group
    work.wait(datetime.timedelta(seconds=timeout))


def framed_parts(
    payload: torch.Tensor, capacity: int, header: Callable[[int, int, int], Header]
) -> Iterator[torch.Tensor]:
    """``payload`` as fixed-size messages of at most ``capacity`` payload words each;
    ``header(part, parts, length)`` makes each part's header."""
    parts = to_parts(payload, capacity)
    for i, part in enumerate(parts):
        yield frame(header(i, len(parts), part.numel()), part, capacity)


# ---- one install on every rank ----------------------------------------------------------------


def install_identity() -> dict[str, Any]:
    """The install a rank runs: the distrl and torch versions and every message header's
    fields (read when called: an install upgraded in place under a live run shows in the
    processes started after it)."""
    headers = (WorkerHeader, ServerHeader, ActorHeader, LearnerHeader)
    return {
        "distrl version": version.__version__,
        "torch version": torch.__version__,
        "message layout": {h.__name__: [f.name for f in dataclasses.fields(h)] for h in headers},
    }


def install_signature(policy: nn.Module) -> dict[str, Any]:
    """What ranks must share to read each other's messages and tensors: the install
    (``install_identity``) and the policy's parameter and buffer shapes."""
    shapes = [(k, tuple(v.shape)) for k, v in policy.state_dict().items()]
    return {**install_identity(), "policy shapes": shapes}


def install_difference(ours: dict[str, Any], theirs: dict[str, Any]) -> str | None:
    """How the install ``theirs`` differs from ``ours`` ('distrl version 0.2.0, not 0.1.0'), or
    None when it does not."""
    odd = [k for k in ours if theirs.get(k) != ours[k]]
    if not odd:
        return None
    said = []
    for k in odd:
        mine, other = ours[k], theirs.get(k)
        short = isinstance(mine, str) and isinstance(other, str | None)
        said.append(f"{k} {other or 'unknown'}, not {mine}" if short else f"{k} differs")
    return "; ".join(said)


def install_mismatch(signatures: list[dict[str, Any]]) -> str | None:
    """Which ranks differ from rank 0, and in what (None when every rank agrees)."""
    ref = signatures[0]
    odd = [r for r, s in enumerate(signatures) if s != ref]
    if not odd:
        return None
    what = [k for k in ref if any(signatures[r].get(k) != ref[k] for r in odd)]
    versions = sorted({str(s.get("distrl version")) for s in signatures})
    return (
        f"ranks {odd} run another install than rank 0: their {' and '.join(what)} differ "
        f"(distrl versions seen: {', '.join(versions)}); install the same distrl and pass the "
        f"same task and --policy settings on every machine"
    )
