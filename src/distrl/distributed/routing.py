"""The learner-actor routing table for weight sync, with chunks sorted largest first.

The reference scheme (RL weight broadcasting over UCCL) computes, once, which learner sends
which parameter to which actor: for each (parameter, actor) pair, in name order, the learner
with the lowest cumulative assigned bytes. That is Graham's list scheduling, within 2 - 1/m of
the optimal makespan on m learners. Visiting the pairs largest first (LPT; Graham 1969) tightens
the guarantee to 4/3 - 1/(3m) of the optimum, at no runtime cost.

The optimum itself is bounded below by what the links must carry: every actor takes in the
whole model over its own link and the learners together send every (chunk, actor) pair, so

    T >= max(model_bytes / receiver_bw, total_bytes / (m * sender_bw)).

List scheduling ends its most loaded learner no later than total/m + p_max (p_max the largest
chunk), so chunks of at most model_bytes / 3 (``split_chunks``, with equal sender and receiver
bandwidth) keep the table within 4/3 of that lower bound for any model and any (L, A).

Pure arithmetic: no torch, no torch.distributed. Every rank computes the same table from the
same parameter metadata, so nothing has to be negotiated at runtime.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Order = Literal["lpt", "name"]


@dataclass(frozen=True)
class Chunk:
    """A contiguous slice of the flat parameter vector: elements [start, start + numel)."""

    index: int
    start: int
    numel: int


@dataclass(frozen=True)
class Route:
    """``learner`` sends ``chunk`` to ``actor``."""

    chunk: Chunk
    actor: int
    learner: int


def split_chunks(numels: list[int], max_numel: int | None = None) -> list[Chunk]:
    """The flat vector's parameter tensors (``numels`` in name order) as chunks, each tensor
    cut into pieces of at most ``max_numel`` elements (default: a third of the model, rounded
    up, which keeps LPT within 4/3 of the link lower bound; see the module docstring)."""
    total = sum(numels)
    if any(n < 0 for n in numels):
        raise ValueError(f"negative tensor size in {numels}")
    cap = max_numel if max_numel is not None else max(1, math.ceil(total / 3))
    if cap < 1:
        raise ValueError(f"max_numel must be >= 1, got {cap}")
    out: list[Chunk] = []
    start = 0
    for n in numels:
        pieces = max(1, math.ceil(n / cap)) if n else 0
        for k in range(pieces):  # near-equal pieces: sizes differ by at most one element
            lo, hi = n * k // pieces, n * (k + 1) // pieces
            out.append(Chunk(len(out), start + lo, hi - lo))
        start += n
    return out


@dataclass(frozen=True)
class RoutingTable:
    learners: tuple[int, ...]
    actors: tuple[int, ...]
    chunks: tuple[Chunk, ...]
    routes: tuple[Route, ...]
    elem_bytes: int = 4

    # ---- who does what -----------------------------------------------------------------------
    def sends(self, learner: int) -> list[Route]:
        """What ``learner`` sends, ordered by (chunk start, actor) on every rank."""
        return sorted(
            (r for r in self.routes if r.learner == learner),
            key=lambda r: (r.chunk.start, r.actor),
        )

    def receives(self, actor: int) -> list[Route]:
        """What ``actor`` receives, one route per chunk, ordered by chunk start."""
        return sorted((r for r in self.routes if r.actor == actor), key=lambda r: r.chunk.start)

    # ---- bytes and time ----------------------------------------------------------------------
    @property
    def model_bytes(self) -> int:
        return sum(c.numel for c in self.chunks) * self.elem_bytes

    @property
    def total_bytes(self) -> int:
        return self.model_bytes * len(self.actors)

    def learner_bytes(self) -> dict[int, int]:
        load = dict.fromkeys(self.learners, 0)
        for r in self.routes:
            load[r.learner] += r.chunk.numel * self.elem_bytes
        return load

    def imbalance(self) -> float:
        """Most loaded learner's bytes over the mean (1.0 = perfectly even)."""
        load = self.learner_bytes()
        mean = self.total_bytes / len(self.learners)
        return max(load.values()) / mean if mean else 1.0

    def makespan(self, sender_bw: float = 1.0, receiver_bw: float = 1.0) -> float:
        """Seconds for one sync if every link runs at its bandwidth (bytes/s) in parallel: the
        busiest learner's sending, or an actor taking in the whole model, whichever is longer."""
        send = max(self.learner_bytes().values()) / sender_bw
        return max(send, self.model_bytes / receiver_bw)

    def lower_bound(self, sender_bw: float = 1.0, receiver_bw: float = 1.0) -> float:
        return lower_bound(
            self.model_bytes, len(self.actors), len(self.learners), sender_bw, receiver_bw
        )


def lower_bound(
    model_bytes: float, actors: int, learners: int, sender_bw: float = 1.0, receiver_bw: float = 1.0
) -> float:
    """max(model / receiver bw, total / (m x sender bw)): no schedule can beat either link."""
    return max(model_bytes / receiver_bw, model_bytes * actors / (learners * sender_bw))


def lpt_guarantee(learners: int) -> float:
    """Graham's bound on LPT's makespan over the optimum: 4/3 - 1/(3m)."""
    return 4 / 3 - 1 / (3 * learners)


def build_table(
    chunks: list[Chunk],
    learners: list[int],
    actors: list[int],
    order: Order = "lpt",
    elem_bytes: int = 4,
) -> RoutingTable:
    """Assign every (chunk, actor) pair to the learner with the lowest cumulative bytes so far
    (ties: the lowest rank). ``order="lpt"`` visits pairs largest chunk first (ties in chunk,
    then actor order); ``order="name"`` is the reference scheme's name order."""
    if not learners or not actors:
        raise ValueError(f"need at least one learner and one actor, got {learners} and {actors}")
    pairs = [(c, a) for c in chunks for a in actors]
    if order == "lpt":
        pairs.sort(key=lambda p: (-p[0].numel, p[0].index, p[1]))
    elif order != "name":
        raise ValueError(f"order must be 'lpt' or 'name', got {order!r}")
    load = dict.fromkeys(learners, 0)
    routes = []
    for chunk, actor in pairs:
        learner = min(learners, key=lambda w: (load[w], w))
        load[learner] += chunk.numel * elem_bytes
        routes.append(Route(chunk, actor, learner))
    return RoutingTable(tuple(learners), tuple(actors), tuple(chunks), tuple(routes), elem_bytes)


def routing_table(
    numels: list[int],
    learners: list[int],
    actors: list[int],
    max_numel: int | None = None,
    order: Order = "lpt",
) -> RoutingTable:
    """The table for a model whose parameter tensors have ``numels`` elements (fp32)."""
    return build_table(split_chunks(numels, max_numel), learners, actors, order)
