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
"""

from __future__ import annotations

from typing import Any, Literal

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
        self.workers = list(range(1, self.world_size))
        self.pairs = pair_groups([SERVER], self.workers, cfg.dist.timeout)
        # Worker r seeds as all-reduce rank r - 1 would (the server as rank 0, whose replica
        # every rank starts from), so one --seed gives ps-* and allreduce the same worker data.
        self.seed_rank = max(ctx.rank - 1, 0)
        self.version = 0  # parameter version this rank holds (server: the newest)
        self.capacity = 0

    @property
    def num_collectors(self) -> int:
        return len(self.workers)

    @property
    def collector_index(self) -> int:
        return self.rank - 1  # the server (rank 0) collects nothing: -1

    @property
    def measures_sync(self) -> bool:
        return False

    def pair(self, worker: int) -> Any:
        """The process group of the server and ``worker``."""
        return self.pairs[(SERVER, worker)]

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
