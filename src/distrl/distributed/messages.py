"""The point-to-point messages of the parameter server and learner-actor, as named records.

A message is one fixed-size float32 tensor: a header (a ``Header`` dataclass, one float32 word
per field, in field order) and then a payload of ``length`` words, zero-padded to the direction's
capacity, so a receiver thread can post ``recv`` of a known size. Header integers are exact in
float32 below 2**24 (versions, iterations and sample counts stay far below it); float fields are
rounded to float32 (the decision statistics a server reports, an actor's rollout seconds). Every
header is written by ``frame`` and read by ``Header.read``: no code indexes a header by position.
The transport (``Inbox`` threads, timed ``isend``) is ``transport.py``, what a coordinator
trusts of a message is the peer layer's (``peers.py``), and who sends what when is each side's.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, TypeVar

import torch

H = TypeVar("H", bound="Header")


@dataclasses.dataclass(frozen=True)
class Header:
    """Base of every header: ``kind`` first, ``length`` (payload words) last."""

    kind: int

    _types: ClassVar[dict[type, tuple[type, ...]]] = {}

    @classmethod
    def size(cls) -> int:
        return len(dataclasses.fields(cls))

    @classmethod
    def _casts(cls) -> tuple[type, ...]:
        if cls not in Header._types:
            Header._types[cls] = tuple(
                float if f.type in ("float", float) else int for f in dataclasses.fields(cls)
            )
        return Header._types[cls]

    def words(self) -> torch.Tensor:
        values = [float(getattr(self, f.name)) for f in dataclasses.fields(self)]
        return torch.tensor(values, dtype=torch.float64).to(torch.float32)

    @classmethod
    def read(cls: type[H], msg: torch.Tensor) -> H:
        """The header at the front of ``msg``."""
        values = msg[: cls.size()].tolist()
        names = [f.name for f in dataclasses.fields(cls)]
        casts = zip(names, cls._casts(), values, strict=True)
        return cls(**{n: cast(v) for n, cast, v in casts})  # keyword-only fields too

    @classmethod
    def payload(cls, msg: torch.Tensor) -> torch.Tensor:
        """The payload words of ``msg`` (a view), as long as its header's ``length`` says."""
        n = cls.size()
        return msg[n : n + int(msg[n - 1])]


def kind_of(msg: torch.Tensor) -> int:
    """The kind of any message: ``kind`` is every header's first field."""
    return int(msg[0])


def frame(header: Header, payload: torch.Tensor, capacity: int) -> torch.Tensor:
    """One fixed-size message: ``header`` then ``payload`` (at most ``capacity`` words), zeros
    after it. ``header.length`` must be the last field and equal the payload's size."""
    n = header.size()
    last = dataclasses.fields(header)[-1].name
    if last != "length" or getattr(header, last, None) != payload.numel():
        raise ValueError(f"{header} does not end with the payload's length {payload.numel()}")
    msg = torch.zeros(n + capacity)
    msg[:n] = header.words()
    msg[n : n + payload.numel()] = payload
    return msg


# ---- parameter server ------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class WorkerHeader(Header):
    """Worker -> server: a gradient, statistics, checkpoint state, or DONE."""

    sender: int
    version: int
    """The parameter version the worker holds."""
    iteration: int
    samples: int
    """Samples behind a gradient (the server's weighted mean)."""
    part: int
    parts: int
    nsums: int
    """Statistics: how many leading words of the row are sums."""
    signal: int = dataclasses.field(default=0, kw_only=True)
    """The SIGINT or SIGTERM the worker received, or its stop request (0: neither): the server
    stops the run (``distrl.interrupts.note``)."""
    length: int


@dataclasses.dataclass(frozen=True)
class ServerHeader(Header):
    """Server -> worker: parameters and the decision that produced them, a statistics reply,
    or BYE."""

    version: int
    action: int
    """Index into ``param_server.ACTIONS`` (step, skip, stop)."""
    approx_kl: float
    pg_loss: float
    v_loss: float
    entropy: float
    clipfrac: float
    part: int
    parts: int
    length: int

    @property
    def stats(self) -> tuple[float, ...]:
        """The decision statistics, in ``Decision.stats`` order."""
        return (self.approx_kl, self.pg_loss, self.v_loss, self.entropy, self.clipfrac)


# ---- learner-actor ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ActorHeader(Header):
    """Actor -> learner: a rollout, a part of the actor's checkpoint state, or DONE."""

    sender: int
    version: int
    """The weights version that collected the rollout."""
    iteration: int
    seconds: float
    """The rollout's own time."""
    part: int
    parts: int
    signal: int = dataclasses.field(default=0, kw_only=True)
    """The SIGINT or SIGTERM the actor received, or its stop request (0: neither): its learner
    passes it on to the learners' exchange (``distrl.interrupts.note``)."""
    length: int


@dataclasses.dataclass(frozen=True)
class LearnerHeader(Header):
    """Learner -> actor, sent alone before the weight chunks the routing table names."""

    version: int
    failed: int
    """ABORT: the learner rank that failed (-1 when unknown or not an abort)."""
    stop: int = 0
    """WEIGHTS: 1 when the learners stop at this version (an interrupt or a stop request they
    agreed on, or their algorithm's early stop): the actor sends its state for that
    iteration's checkpoint and stops (``distrl.interrupts``)."""
    length: int = 0
