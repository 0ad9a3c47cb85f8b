"""Parameter-server strategies: bulk synchronous (BSP), asynchronous (ASP) and bounded
staleness (BAP), after MALib's parameter-server modes. Rank 0 serves: it holds the
authoritative parameters, the optimizer, the learning rate and the normalizer, and takes every
decision (skip on NaN/Inf, early stop on KL, adaptive LR). Ranks 1.. are workers: they collect,
compute gradients, and apply the parameters the server sends back.

The sides: the server (rank 0, ``ps_server.py``) and a worker (``ps_worker.py``), a coordinator
and its peers on the peer layer (``distributed/peers.py``, shared with learner-actor: framed
fixed-size float32 messages in a pair group per worker, one receiver thread per peer, sends with
a deadline, a bad message or a silent worker dropped by name). This module holds what both
sides share: the message kinds and the set-up.

Messages (``distributed/messages.py``): worker -> server a ``WorkerHeader`` (kind, sender,
version, iteration, samples, part, parts, nsums, length), server -> worker a ``ServerHeader``
(kind, version, action, the decision statistics, part, parts, length), each followed by its
payload and padded to one fixed size per direction. Payloads longer than one message
(statistics of tiny models, checkpoint state) travel in parts.

Modes (per minibatch; a "round" is each worker's r-th gradient):

- **BSP**: the server waits for every live worker's gradient of the round, averages them
  (sample-weighted; the plain mean, in rank order, when the counts are equal, which is then
  bit-for-bit what ``allreduce`` computes), decides, steps, and sends the new parameters and
  the decision to every worker. Statistics rounds (advantage moments, normalizer) are summed
  over all workers the same way, so BSP reproduces ``allreduce``.
- **ASP**: the server applies each gradient as it arrives and replies to that worker only.
  Staleness = versions applied since the worker's parameters were sent.
- **BAP**: rounds as BSP, but a worker keeps computing with its cached parameters while fewer
  than ``--dist.ps.staleness`` rounds are outstanding; a round open longer than
  ``--dist.ps.lifetime`` seconds is closed with the gradients that came, and the late ones of
  that round are dropped and counted.

Under ASP and BAP each worker normalizes advantages and merges observation moments with every
statistics message the server received since its last one (its own included), so all replicas
see the same data, in a different order than the server (float rounding only).

**Sink nodes** (``--dist.ps.group-size G``, MALib's local sink nodes; ``Tree``): the ranks
form groups of G consecutive ranks. Rank 0's group talks to the server directly; the first rank
of every other group is a sink (``ps_sink.py``): to its workers it is their server, to the
server one peer. It closes its workers' rounds synchronously (their sample-weighted mean goes
up as one gradient of their summed samples) and their statistics rounds (their rows go up
stacked, each under its rank, so the server absorbs every worker's row as without sinks), and
passes each message of the server down to its workers as it came. Across the server's peers
the mode is the strategy's: BSP waits for every sink, ASP applies each sink's gradient as it
comes, BAP bounds the rounds a sink runs ahead. One gradient up and one set of parameters down
per group instead of per worker: what crosses the link between machines when G is the
processes per machine. BSP with sinks equals BSP without them to float rounding (the same sum,
grouped differently; the statistics are summed row by row in rank order, bit for bit).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from distrl.algorithms.ppo import GradientLearner
from distrl.config import TrainConfig
from distrl.distributed.collectives import Collectives
from distrl.distributed.context import DistContext
from distrl.distributed.transport import pair_groups

SERVER = 0
# worker -> server kinds
STATS, GRAD, STATE, DONE = 1, 2, 3, 4
# server -> worker kinds
PARAMS, STATS_REPLY, BYE = 1, 2, 3
ACTIONS: tuple[Literal["step", "skip", "stop"], ...] = ("step", "skip", "stop")
NO_STATS = (0.0,) * 5
"""The decision statistics of a message that carries none (``Decision.stats`` order)."""


@dataclass(frozen=True)
class Tree:
    """Who talks to whom (``--dist.ps.group-size``): the server (rank 0), the sinks, and the
    workers under each coordinator. ``group`` 0: no sinks, every other rank a worker of the
    server."""

    world: int
    group: int = 0

    @property
    def sinks(self) -> list[int]:
        if not self.group:
            return []
        return list(range(self.group, self.world, self.group))

    @property
    def workers(self) -> list[int]:
        """Every rank that collects and learns, in rank order."""
        sinks = set(self.sinks)
        return [r for r in range(1, self.world) if r not in sinks]

    @property
    def server_peers(self) -> list[int]:
        """The server's peers: rank 0's own group's workers, then the sinks."""
        if not self.group:
            return list(range(1, self.world))
        return list(range(1, min(self.group, self.world))) + self.sinks

    def members(self, sink: int) -> list[int]:
        """A sink's workers: the rest of its group."""
        return list(range(sink + 1, min(sink + self.group, self.world)))

    def parent(self, rank: int) -> int:
        """Whom ``rank`` sends to: its group's sink, or the server."""
        if not self.group or rank < self.group or rank % self.group == 0:
            return SERVER
        return rank - rank % self.group

    def describe(self) -> str:
        """Who talks to whom, in words (the run's first lines)."""
        own = self.server_peers[: len(self.server_peers) - len(self.sinks)]
        groups = "; ".join(f"sink node {s} for workers {self.members(s)}" for s in self.sinks)
        return f"rank 0 serves workers {own} and {groups}"

    def pairs(self, timeout: float) -> dict[tuple[int, int], Any]:
        """A pair group per (coordinator, peer) link of the tree (collective: every rank)."""
        groups = pair_groups([SERVER], self.server_peers, timeout)
        for sink in self.sinks:
            groups |= pair_groups([sink], self.members(sink), timeout)
        return groups


def mean_gradient(grads: list[tuple[torch.Tensor, int]]) -> torch.Tensor:
    """The sample-weighted mean of (gradient, samples) pairs, in the order given; with equal
    counts the plain sum divided by their number, as allreduce computes it (bit for bit)."""
    counts = [c for _, c in grads]
    flat = grads[0][0].clone()
    if len(set(counts)) == 1:
        for g, _ in grads[1:]:
            flat += g
        if len(grads) > 1:
            flat.div_(len(grads))
    else:
        flat.mul_(counts[0])
        for g, c in grads[1:]:
            flat.add_(g, alpha=c)
        flat.div_(sum(counts))
    return flat


def worker_message_error(
    kind: int, nsums: int, payload: torch.Tensor, num_grad: int, layout: Any
) -> str | None:
    """Why a worker's gradient or statistics message cannot be used (None: it can): a gradient
    of another length, statistics whose sums do not fit the row, or a row of another size than
    ``layout`` (a ``StatsLayout``, or None before it is known) names."""
    n = num_grad + 6
    if kind == GRAD and payload.numel() != n:
        return f"a gradient of {payload.numel()} words, not {n}"
    if kind != STATS:
        return None
    if not 0 < 2 * nsums <= payload.numel():
        return f"statistics of {nsums} sums in {payload.numel()} words"
    if layout is not None:
        want = (layout.num_sums, 2 * layout.numel)
        if (nsums, payload.numel()) != want:
            return (
                f"statistics of {nsums} sums in {payload.numel()} words, not {want[0]} in {want[1]}"
            )
    return None


def tree_error(group: int, world: int) -> str | None:
    """Why ``--dist.ps.group-size group`` does not fit ``world`` ranks (None: it does)."""
    if not group:
        return None
    if world % group or world < 2 * group:
        return (
            f"--dist.ps.group-size {group} needs a multiple of {group} processes, at least "
            f"{2 * group} (rank 0's group and one sink's), got {world}; use e.g. --nproc "
            f"{2 * group}, or --nproc {group} on each of --nnodes machines"
        )
    return None


class PSRank(Collectives):
    """What the server and a worker share: the strategy's name and mode, the pair groups, who
    collects, the seeding, and the set-up that makes every replica rank 0's."""

    def __init__(self, ctx: DistContext, cfg: TrainConfig, mode: str):
        super().__init__(ctx, profile_sync=False, timeout=cfg.dist.timeout)
        if not self.active:
            raise ValueError(
                f"--dist.strategy ps-{mode} needs at least 2 processes (rank 0 serves, the "
                f"others work); use e.g. --nproc 3 for 2 workers"
            )
        self.mode, self.cfg = mode, cfg
        self.name = f"ps-{mode}"
        self.stats_agreed = mode == "bsp"  # asp/bap: what the server got since the last reply
        self.tree = Tree(self.world_size, cfg.dist.ps.group_size)
        why = tree_error(self.tree.group, self.world_size)
        if why:
            raise ValueError(why)
        self.workers = self.tree.workers
        self.pairs = self.tree.pairs(cfg.dist.timeout)
        # Worker i (in rank order, sinks left out) seeds as all-reduce rank i would (the server
        # as rank 0, whose replica every rank starts from), so one --seed gives ps-* and
        # allreduce the same worker data, with sinks or without.
        self.seed_rank = max(self.collector_index, 0)
        self.version = 0  # parameter version this rank holds (server: the newest)
        self.capacity = 0

    @property
    def num_collectors(self) -> int:
        return len(self.workers)

    @property
    def collector_index(self) -> int:
        """Its place among the workers; -1 on the server and on a sink (they collect
        nothing)."""
        return self.workers.index(self.rank) if self.rank in self.workers else -1

    @property
    def measures_sync(self) -> bool:
        return False

    def pair(self, peer: int, coordinator: int = SERVER) -> Any:
        """The process group of ``coordinator`` (the server, or a sink) and its ``peer``."""
        return self.pairs[(coordinator, peer)]

    def setup(self, policy: nn.Module, learner: GradientLearner) -> None:
        """Rank 0's replica reaches every worker (one coalesced broadcast, as allreduce); the
        message capacity fits a gradient and its decision scalars. Each side then starts its
        receiver threads (``start``)."""
        self.policy, self.learner = policy, learner
        self.check_install(policy)
        self.num_grad = learner.num_grad
        self.capacity = max(learner.num_grad + 6, 4096)
        self.broadcast_tensors_(list(policy.parameters()) + list(policy.buffers()))
        self.start()

    def start(self) -> None:
        raise NotImplementedError

    def verify_replicas(self, module: nn.Module) -> None:
        """The server's parameters are authoritative; workers may hold older versions (ASP,
        BAP), so there is nothing to compare."""
