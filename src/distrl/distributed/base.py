"""The Strategy seam: the one object the runner talks to about anything that crosses processes.

A strategy is chosen by ``--dist.strategy`` (``make_strategy`` in ``distributed/strategies.py``)
and handed to the runner, which never builds one. It owns:

- **roles**: whether this rank collects experience, learns, or serves parameters;
- **step**: how one minibatch's local ``[grads | decision scalars]`` becomes new parameters
  (combine across ranks, let the learner decide skip / early stop / LR, take the step);
- **agreed statistics**: ``reduce_stats`` sums and gathers named tensors in one collective;
- **agreement on state**: rank 0's replica reaches every rank (``setup``), object
  broadcast/gather for run-directory and checkpoint bookkeeping, the replica check;
- **liveness and time**: heartbeats, and the seconds spent inside collectives and waiting for
  peers (``take_times``).

Every collective goes through ``Collectives._timed`` (distributed/collectives.py), so each one is
timed and a dead or stalled peer surfaces as a ``PeerFailure`` naming it.

Where the strategies of the design plug in:

=================  ==========================================  ================================
strategy           roles                                       ``step``
=================  ==========================================  ================================
``allreduce``      every rank collects and learns              flat all-reduce, every rank
                                                               decides from identical numbers
``ps-*``           rank 0 serves; the others collect and       gradients to the server, which
                   compute gradients                           decides and steps; params back
``learner-actor``  ranks < L learn; the others only collect    all-reduce in the learners'
                                                               group; weights to the actors
=================  ==========================================  ================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import nn

from distrl.algorithms.ppo import Decision, GradientLearner


@dataclass(frozen=True)
class Roles:
    """What this rank does each iteration."""

    collector: bool = True
    """Steps environments with the current policy and fills a rollout buffer."""
    learner: bool = True
    """Computes advantages and gradients from a rollout."""
    server: bool = False
    """Holds the authoritative parameters and optimizer (parameter-server strategies)."""


@dataclass
class Agreed:
    """What every participating rank holds after ``reduce_stats``."""

    sums: dict[str, torch.Tensor] = field(default_factory=dict)
    """Each named tensor summed over the participating ranks (float64)."""
    gathered: dict[str, torch.Tensor] = field(default_factory=dict)
    """Each named tensor of every participating rank, stacked: [ranks, *shape] (float64)."""


class Strategy(Protocol):
    """What the runner needs from a way of training across processes (see module docstring)."""

    name: str
    roles: Roles
    rank: int
    world_size: int
    is_main: bool
    active: bool
    """False for one process: every collective is then the identity and costs nothing."""
    seed_rank: int
    """Seeds are ``seed + seed_rank``: the rank itself, except where a rank stands in for
    another (learner-actor: actor i seeds as rank i would, so one learner and one actor
    reproduce a single process)."""

    @property
    def num_collectors(self) -> int:
        """Ranks that collect experience (env steps per iteration count only these)."""

    @property
    def measures_sync(self) -> bool:
        """Whether ``take_times``' sync figure is measured (else it is reported as null)."""

    def setup(self, policy: nn.Module, learner: GradientLearner) -> None:
        """Make every rank's replica (parameters, buffers, optimizer state) equal rank 0's."""

    def step(self, learner: GradientLearner, flat: torch.Tensor) -> Decision:
        """Turn this rank's ``[grads | scalars]`` of one minibatch into new parameters."""

    def reduce_stats(
        self, sums: dict[str, torch.Tensor], gather: dict[str, torch.Tensor] | None = None
    ) -> Agreed:
        """Sum ``sums`` and stack ``gather`` over the participating ranks, in one collective."""

    def broadcast_object(self, obj: Any, src: int = 0) -> Any: ...

    def gather_object(self, obj: Any, dst: int = 0) -> list[Any] | None: ...

    def barrier(self) -> None: ...

    def heartbeat(self, iteration: int) -> None:
        """Record that this rank entered ``iteration`` (read when a peer goes silent)."""

    def verify_replicas(self, module: nn.Module) -> None:
        """Raise if the ranks that should hold identical parameters do not."""

    def take_times(self) -> tuple[float, float]:
        """(seconds inside collectives, seconds waiting for peers) since the last call."""

    def finish(self) -> None:
        """This rank's training loop is over (a worker tells its server)."""
