"""The Strategy seam: the one object the runner talks to about anything that crosses processes.

A strategy is chosen by ``--dist.strategy`` (the ``STRATEGIES`` registry in
``distributed/strategies.py``) and handed to the runner, which never builds one. It holds no
loop: the runner's role loops (``runner/roles.py``) run every rank's iterations. It owns:

- **the role**: what this rank does (``Role``: the loop it runs). A strategy's registry row
  builds this rank's *side* (a parameter server's server or worker, a learner or an actor):
  for a rank that does not simply collect and learn, the side is the narrow link its role loop
  talks through (``ServerLink``, ``LearnerLink``, ``ActorLink``);
- **step**: how one minibatch's local ``[grads | decision scalars]`` becomes new parameters
  (combine across ranks, let the learner decide skip / early stop / LR, take the step);
- **agreed statistics**: ``reduce_stats`` sums and gathers named tensors in one collective;
- **agreement on state**: rank 0's replica reaches every rank (``setup``), object
  broadcast/gather for run-directory and checkpoint bookkeeping, the replica check;
- **liveness and time**: heartbeats; the seconds in collectives and waiting (``take_times``).

The algorithm is the other, independent axis (a ``runner.base.Runner`` subclass). ``Strategy``
and the link protocols list every member the runner and the CLI use; mypy (``make lint``)
checks that each class in the ``STRATEGIES`` registry provides them.

Every collective goes through ``Collectives._timed`` (distributed/collectives.py), so each one is
timed and a dead or stalled peer surfaces as a ``PeerFailure`` naming it.

=================  ==========================================  ================================
strategy           roles (the runner's loop; the link)         ``step``
=================  ==========================================  ================================
``allreduce``      every rank collects and learns               flat all-reduce, every rank
                   (``collect_and_learn``; no link)             decides from identical numbers
``ps-*``           rank 0 serves (``serve``; ``ServerLink``);   gradients to the server, which
                   the others collect and compute gradients     decides and steps; params back
``learner-actor``  ranks < L learn from their actors'           all-reduce in the learners'
                   rollouts (``LearnerLink``); the others act   group; weights to the actors
                   (``ActorLink``)
=================  ==========================================  ================================
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch import nn

from distrl.algorithms.ppo import Decision, GradientLearner
from distrl.distributed.liveness import PeerFailure

if TYPE_CHECKING:
    from distrl.training_state import TrainingState


COLLECT_AND_LEARN, SERVE, LEARN_FROM_ACTORS, ACT = "collect_and_learn", "serve", "learn", "act"
RELAY = "relay"
LOOPS = (COLLECT_AND_LEARN, SERVE, LEARN_FROM_ACTORS, ACT, RELAY)


@dataclass(frozen=True)
class Role:
    """What this rank does each iteration: the role loop it runs (``runner/roles.py``). A rank
    whose loop is not ``collect_and_learn`` talks to its peers through its strategy object, which
    is then its link (``ServerLink``, ``LearnerLink``, ``ActorLink``, ``SinkLink``)."""

    loop: str = COLLECT_AND_LEARN
    remote_rollouts: int = 0
    """A learner that does not collect: how many other ranks' rollouts it trains on per
    iteration (learner-actor: its actors)."""

    def __post_init__(self) -> None:
        if self.loop not in LOOPS:
            raise ValueError(f"role loop {self.loop!r} is not one of {LOOPS}")

    @property
    def collector(self) -> bool:
        """Steps environments with the current policy and fills a rollout buffer."""
        return self.loop in (COLLECT_AND_LEARN, ACT)

    @property
    def learner(self) -> bool:
        """Computes advantages and gradients from a rollout."""
        return self.loop in (COLLECT_AND_LEARN, LEARN_FROM_ACTORS)

    @property
    def server(self) -> bool:
        """Holds the authoritative parameters and optimizer (parameter-server strategies)."""
        return self.loop == SERVE


@dataclass
class Agreed:
    """What every participating rank holds after ``reduce_stats``."""

    sums: dict[str, torch.Tensor] = field(default_factory=dict)
    """Each named tensor summed over the participating ranks (float64)."""
    gathered: dict[str, torch.Tensor] = field(default_factory=dict)
    """Each named tensor of every participating rank, stacked: [ranks, *shape] (float64)."""
    ranks: tuple[int, ...] = ()
    """Whose row each ``gathered`` row is (empty: rows 0, 1, ... of the participating ranks)."""
    collectors: tuple[int, ...] | None = None
    """Every collector whose rows count now, in the numbering of ``ranks``: an all-gather's
    rows, elastic's members' slots, a parameter server's live workers (whose rows come a
    message at a time). Rows kept for any other (a rank that left, a dropped worker) no longer
    count. None where this rank sees only its own row (a parameter server's worker)."""


@dataclass(frozen=True)
class StatsLayout:
    """The named statistics one rank contributes to ``reduce_stats``, as one float64 row:
    the ``sums`` fields (added up over ranks), then the ``gather`` fields (kept per rank).

    One codec for every transport: the all-gather row of ``Collectives.reduce_stats``, the
    parameter server's statistics message, and the server's own decoding of what its workers
    sent (``StatsLayout.agreed``, then ``Runner.absorb``) all pack and unpack through it, by
    name."""

    sums: tuple[tuple[str, tuple[int, ...]], ...]
    gather: tuple[tuple[str, tuple[int, ...]], ...] = ()

    def __post_init__(self) -> None:
        # Fields in name order: a layout built from a dict on one rank and one declared by the
        # runner on another pack and unpack the same row whatever order they were written in.
        object.__setattr__(self, "sums", tuple(sorted(self.sums)))
        object.__setattr__(self, "gather", tuple(sorted(self.gather)))

    @classmethod
    def of(
        cls, sums: dict[str, torch.Tensor], gather: dict[str, torch.Tensor] | None = None
    ) -> StatsLayout:
        shape = lambda d: tuple((k, tuple(v.shape)) for k, v in d.items())  # noqa: E731
        return cls(shape(sums), shape(gather or {}))

    @staticmethod
    def _numel(shape: tuple[int, ...]) -> int:
        n = 1
        for s in shape:
            n *= s
        return n

    @property
    def num_sums(self) -> int:
        return sum(self._numel(s) for _, s in self.sums)

    @property
    def numel(self) -> int:
        return self.num_sums + sum(self._numel(s) for _, s in self.gather)

    def pack(
        self, sums: dict[str, torch.Tensor], gather: dict[str, torch.Tensor] | None = None
    ) -> torch.Tensor:
        """[sums fields | gather fields] as one float64 row; raises if a field is missing or
        has another shape than the layout names."""
        gather = gather or {}
        got = StatsLayout.of(sums, gather)
        if got != self:
            raise ValueError(f"statistics {got} do not match the layout {self}")
        parts = [sums[k] for k, _ in self.sums] + [gather[k] for k, _ in self.gather]
        return torch.cat([t.detach().reshape(-1).to(torch.float64) for t in parts])

    def _split(
        self, flat: torch.Tensor, fields: tuple[tuple[str, tuple[int, ...]], ...], lead: tuple
    ) -> dict[str, torch.Tensor]:
        out, offset = {}, 0
        for name, shape in fields:
            n = self._numel(shape)
            out[name] = flat[..., offset : offset + n].reshape(*lead, *shape)
            offset += n
        return out

    def unpack_sums(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """The ``sums`` fields of a row (or of a summed row) by name."""
        return self._split(flat[..., : self.num_sums], self.sums, flat.shape[:-1])

    def unpack_gather(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """The ``gather`` fields of a row [numel] or of stacked rows [ranks, numel] by name."""
        return self._split(rows[..., self.num_sums :], self.gather, rows.shape[:-1])

    def agreed(
        self, sums: torch.Tensor, rows: dict[int, torch.Tensor], live: Iterable[int]
    ) -> Agreed:
        """What a parameter server took in (a summed row, each worker's whole row, its live
        workers) in the form ``reduce_stats`` hands a collecting rank, so an algorithm absorbs
        both alike."""
        ranks = tuple(sorted(rows))
        gathered = self.unpack_gather(torch.stack([rows[r] for r in ranks])) if ranks else {}
        return Agreed(self.unpack_sums(sums), gathered, ranks, tuple(sorted(live)))


class Strategy(Protocol):
    """What the runner and the CLI need from a way of training across processes (see the
    module docstring). Every member here is used outside the strategy's own module; nothing
    else is."""

    name: str
    role: Role
    """This rank's role loop; the strategy object is the link of any loop but
    ``collect_and_learn``."""
    rank: int
    world_size: int
    is_main: bool
    active: bool
    """False for one process: every collective is then the identity and costs nothing."""
    seed_rank: int
    """Seeds are ``seed + seed_rank``: the rank itself, except where a rank stands in for
    another (learner-actor: actor i seeds as rank i would, so one learner and one actor
    reproduce a single process)."""
    env_rows: int
    """Rows of this rank's env, set before ``setup`` (learner-actor sizes messages by them)."""

    @property
    def num_collectors(self) -> int:
        """Ranks that collect experience (env steps per iteration count only these)."""
        ...

    @property
    def collector_index(self) -> int:
        """This rank's position among the collecting ranks (0-based; -1 where it does not
        collect): multi-task RLOO shards its tasks over the collectors by it."""
        ...

    stop_requested: bool
    """Stop after this iteration: the ranks agreed on an interrupt or a stop request
    (``interrupt``), or whoever coordinates this rank asked it to (a parameter server whose
    algorithm stopped early on its view of every worker's statistics, or that was interrupted;
    learner-actor's learners whose algorithm stopped early)."""
    interrupt: int
    """The signal (SIGINT, SIGTERM) that stopped the run, or ``interrupts.REQUEST`` for a
    callback's stop request, as every rank that learns it agrees (0: none). It travels in the
    exchange each iteration already makes (``distrl.interrupts``): the ``reduce_stats`` row, a
    worker's or an actor's message header, the server's reply."""

    @property
    def stats_agreed(self) -> bool:
        """Whether ``reduce_stats`` gives every participating rank the same totals of the same
        iteration (allreduce, ps-bsp, learner-actor's learners); ps-asp and ps-bap hand each
        worker what the server got since its last exchange instead."""
        ...

    @property
    def measures_sync(self) -> bool:
        """Whether ``take_times``' sync figure is measured (else it is reported as null)."""
        ...

    def setup(self, policy: nn.Module, learner: GradientLearner) -> None:
        """Make every rank's replica (parameters, buffers, optimizer state) equal rank 0's."""

    @property
    def recovery(self) -> Recovery | None:
        """How a collecting and learning rank survives a lost peer (elastic), or None: a lost
        peer then ends the run, naming it."""
        ...

    def record_metrics(self) -> dict[str, Any]:
        """Keys the strategy adds to every iteration's record (``dist/...``)."""
        ...

    def gather_rank_times(self, times: list[float]) -> torch.Tensor | None:
        """Every rank's ``times`` [ranks, 4] (``rank/<r>/*``), or None (``Collectives``)."""
        ...

    def step(self, learner: GradientLearner, flat: torch.Tensor) -> Decision:
        """Turn this rank's ``[grads | scalars]`` of one minibatch into new parameters."""
        ...

    def reduce_stats(
        self, sums: dict[str, torch.Tensor], gather: dict[str, torch.Tensor] | None = None
    ) -> Agreed:
        """Sum ``sums`` and stack ``gather`` over the participating ranks, in one collective."""
        ...

    def broadcast_object(self, obj: Any, src: int = 0) -> Any: ...

    def gather_object(self, obj: Any, dst: int = 0) -> list[Any] | None: ...

    def barrier(self) -> None: ...

    def heartbeat(self, iteration: int) -> None:
        """Record that this rank entered ``iteration`` (read when a peer goes silent)."""

    def verify_replicas(self, module: nn.Module) -> None:
        """Raise if the ranks that should hold identical parameters do not."""

    def take_times(self) -> tuple[float, float]:
        """(seconds inside collectives, seconds waiting for peers) since the last call."""
        ...

    def finish(self) -> None:
        """This rank's training loop is over (a worker tells its server)."""


class Recovery(Protocol):
    """What ``runner.roles.collect_and_learn`` asks of a strategy that survives a lost peer
    (elastic): the loop stays the loop, and these three calls are all it knows of recovery."""

    def enter(self, runner: Any) -> None:
        """Before the first iteration: a rank that joins a running group takes its state."""

    def boundary(self, runner: Any) -> None:
        """After an iteration every member completed: let in the ranks waiting to join."""

    def recover(self, runner: Any, held: TrainingState, error: PeerFailure) -> None:
        """A peer was lost inside the iteration begun from ``held`` (a copy of the training
        state, ``distrl/training_state.py``): go on with the survivors from one state."""


# ---- links: what a role loop needs of its strategy beyond step and reduce_stats ----------------


@dataclass
class ServerEvent:
    """What a parameter server's loop yields: an iteration every live worker completed (with
    the server's figures for it), or a checkpoint whose per-rank states have all arrived."""

    kind: str  # "iteration" or "checkpoint"
    iteration: int
    metrics: dict[str, Any] = field(default_factory=dict)
    states: dict[int, Any] = field(default_factory=dict)


StatsSink = Callable[[torch.Tensor, dict[int, torch.Tensor], Iterable[int]], None]
"""``(summed sums row, {worker: its whole statistics row}, the live workers)``, packed by the
``StatsLayout``."""


class ServerLink(Protocol):
    """The serving rank of a parameter server (``runner.roles.serve``)."""

    def serve(
        self,
        on_stats: StatsSink,
        start_iteration: int,
        should_stop: Callable[[], bool],
        layout: StatsLayout | None = None,
    ) -> Iterator[ServerEvent]:
        """Apply what the workers send until they finish; ``on_stats`` takes in each
        statistics message, ``should_stop`` is the algorithm's early stop on what it took in;
        ``layout``: what every statistics row must hold (a row of another size drops its
        sender)."""
        ...

    def release(self) -> list[str]:
        """After the loop: what is left to say, then the dropped workers are told to leave
        (one line each for any that did not)."""
        ...


class SinkLink(Protocol):
    """A parameter server's sink node (``runner.roles.relay``; ``ps_sink.py``)."""

    def relay(self, start_iteration: int, layout: StatsLayout | None = None) -> None: ...

    def release(self) -> list[str]: ...


class LearnerLink(Protocol):
    """A learner that trains on its actors' rollouts (``runner.roles.learn_from_actors``)."""

    version: int
    """The version of the weights it last pushed (the iteration, on-policy)."""

    def receive_rollouts(self, rollouts: Any) -> None:
        """One rollout from every live actor, side by side in ``rollouts`` (a ``RemoteRollouts``;
        an off-policy learner's ``RemoteTransitions`` takes their replay rows)."""

    def push_weights(self, stop: bool = False) -> None:
        """The new parameters to every actor; ``stop``: the learners' algorithm stopped early at
        this version, so the actors stop with them."""

    def learner_states(self, iteration: int, own: Any) -> list[Any] | None:
        """Every rank's checkpoint state for ``iteration``, indexed by rank, on rank 0."""
        ...

    def take_metrics(self) -> dict[str, Any]:
        """This iteration's lag, drop and weight-sync figures (``messages``: lines to say)."""
        ...

    def release(self) -> list[str]:
        """After ``finish``: the dropped actors are told to leave (a line for any that did not)."""
        ...


class ActorLink(Protocol):
    """A rank that only collects (``runner.roles.act``)."""

    lag_bound: int
    """How many versions behind the iteration its weights may be (0: on-policy)."""
    version: int
    """The version of the weights it holds."""
    stop_at: int | None
    """The version (the iteration) the learners stopped at after an interrupt, once weights
    saying so arrived (``await_weights``); None until then."""

    def await_weights(self, needed: int) -> None:
        """Block until the weights held are at least version ``needed``."""

    def send_rollout(self, source: Any, iteration: int, seconds: float) -> None:
        """This iteration's rollout (a ``Collector``) or replay rows (an off-policy runner)."""

    def send_state(self, iteration: int, state: Any) -> None:
        """This rank's checkpoint state for ``iteration``, to its learner."""
