"""``--dist.strategy`` name -> strategy; the runner is handed the result and never builds one.

Adding a strategy is a class in its own file (the ``Strategy`` protocol of
``distributed/base.py``: its ``role``, ``step``, ``reduce_stats``; most
inherit the timed collectives of ``Collectives``) plus one ``STRATEGIES`` line naming how to
build it, which ``--dist`` options only it reads, what it does not give an algorithm (with the
reason), how many processes it needs and whether its rollouts may come from older weights.
``tests/distributed/test_strategies.py`` adds one that way.

This table and the algorithm registry (``runner/algorithms.ALGORITHMS``, which reads this one;
never the reverse) hold every compatibility rule: ``runner.algorithms.check_compatible`` checks
a config against both before anything starts. ``check_strategy`` is this table's own part (an
unknown strategy, another strategy's options, too few processes); ``make_strategy`` runs it
again inside each rank.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from distrl.config import DistConfig, TrainConfig
from distrl.distributed.actor import Actor
from distrl.distributed.allreduce import AllReduceStrategy
from distrl.distributed.base import Strategy
from distrl.distributed.context import DistContext
from distrl.distributed.learner import Learner
from distrl.distributed.param_server import SERVER, Tree, tree_error
from distrl.distributed.ps_server import PSServer
from distrl.distributed.ps_sink import PSSink
from distrl.distributed.ps_worker import PSWorker

# What a strategy may give an algorithm; an algorithm's needs name these (runner/algorithms.py).
WHOLE_EPISODES = "whole episodes"
"""A learner's batch may be whole episodes of varying length (not fixed-length rollouts)."""
AGREED_STATS = "agreed statistics"
"""Every collecting rank holds the same statistics of every rank's batch each iteration."""
STATS_WHERE_WEIGHTS = "statistics where the weights are"
"""The agreed statistics reach the ranks that update the weights, in the same iteration."""
WHOLE_LEARNER = "the whole learner on every rank"
"""Every rank that learns holds and steps all of the learner: its trained weights and what
lives beside them (target networks, a temperature), from its own data (the off-policy
learners)."""
SMALL_RANK_STATE = "a small rank state"
"""A rank's state (``Runner.rank_state``) may be large (a replay buffer)."""
CAPABILITIES = (
    WHOLE_EPISODES,
    AGREED_STATS,
    STATS_WHERE_WEIGHTS,
    WHOLE_LEARNER,
    SMALL_RANK_STATE,
)

_LEARNER_PS = (
    "its server steps the trained weights and sends only those, so the target networks and "
    "the temperature the off-policy learners keep beside them would stay behind on the workers; "
    "use --dist.strategy allreduce"
)
_REPLAY_ELASTIC = (
    "it holds a copy of every rank's state at each iteration's start to roll back to, and a "
    "copy of a replay buffer costs more than the iteration; use --dist.strategy allreduce (pqn, "
    "which has no replay, runs under elastic)"
)


_OVERLAP = ("overlap", "bucket_mb")
_NO_OVERLAP = {
    "elastic": (
        "it survives a collective that fails mid-iteration by dropping its process group, and "
        "buckets still in flight on that group could not be abandoned safely"
    ),
    "ps": "its workers send their gradients to the server point to point; there is no all-reduce",
}


def _overlap_refusal(d: DistConfig) -> str | None:
    """Why ``--dist.overlap`` is refused with ``d`` (None: it is not)."""
    if not d.overlap:
        return None
    why = _NO_OVERLAP.get("ps" if d.parameter_server else d.strategy)
    if why:
        return f"--dist.overlap does not compose with --dist.strategy {d.strategy}: {why}"
    if d.profile_sync:
        return (
            "--dist.overlap with --dist.profile-sync: a barrier before each bucket would wait "
            "inside backward and undo the overlap; use one or the other"
        )
    return None


def _one(dist: DistConfig) -> int:
    return 1


def _never(dist: DistConfig) -> bool:
    return False


@dataclass(frozen=True)
class StrategySpec:
    build: Callable[[DistContext, TrainConfig], Strategy]
    options: tuple[str, ...] = ()
    """``--dist`` fields (dotted below ``dist``) that only this strategy reads."""
    lacks: Mapping[str, str] = field(default_factory=dict)
    """Capability (``CAPABILITIES``) -> why this strategy does not give it; an algorithm (or an
    algorithm's option) that needs it is refused under this strategy with that reason."""
    min_world: Callable[[DistConfig], int] = _one
    """The fewest processes it runs on."""
    too_few: Callable[[DistConfig, int], str] = lambda d, world: (
        f"--dist.strategy {d.strategy} needs more than {world} processes; raise --nproc"
    )
    """The refusal below ``min_world`` (the DistConfig, the world size given)."""
    off_policy: Callable[[DistConfig], bool] = _never
    """Whether a learner may train on rollouts collected with older weights (an algorithm then
    needs an off-policy correction: ``AlgorithmSpec.corrects_off_policy``)."""
    every_rank_learns: bool = False
    """Every rank computes gradients and takes each step with the others (no server, no
    actors): ``distrl pretrain`` runs under it."""
    launcher: str = ""
    """The module whose ``launch`` starts its ranks for ``distrl train --nproc N`` (empty:
    torchrun, ``distributed/launch.py``)."""
    collectors: Callable[[DistConfig, int], int] = lambda d, world: world
    """How many of ``world`` ranks collect env steps (its sides' ``num_collectors``), known
    before any rank starts: what a schedule in env steps counts in iterations."""
    fits: Callable[[DistConfig, int], str | None] = lambda d, world: None
    """Why its options do not fit ``world`` ranks beyond their number (None: they do)."""


_EPISODES_LA = (
    "its actors ship fixed-length rollouts to the learners, and episodic batches are whole "
    "episodes of varying length per task; use --dist.strategy allreduce"
)
_POPART_PS = (
    "PopArt rescales the critic's output layer when the agreed value-target statistics move, and "
    "under a parameter server the weights live on the server while the workers agree on the "
    "statistics; use --dist.strategy allreduce or learner-actor, or --policy.popart-tasks 0"
)
_EPISODES_ELASTIC = (
    "its episodic batches shard whole tasks over a fixed set of ranks, which a lost rank would "
    "change mid-iteration; use --dist.strategy allreduce"
)
_UNAGREED = "each worker's statistics reach the server alone; the workers do not agree on them"


def _ps_too_few(d: DistConfig, world: int) -> str:
    why = tree_error(d.ps.group_size, world)
    if why:
        return why
    return (
        f"--dist.strategy {d.strategy} needs at least 2 processes (rank 0 serves the "
        f"parameters, the others collect and compute gradients), got {world}; use e.g. "
        f"--nproc 3 for 2 workers"
    )


def _la_too_few(d: DistConfig, world: int) -> str:
    L = d.learners
    return (
        f"--dist.strategy learner-actor with --dist.learners {L} needs at least {2 * L} "
        f"processes (ranks 0..{L - 1} learn, every learner needs an actor), got {world}; use "
        f"e.g. --nproc {2 * L}"
    )


def _allreduce(ctx: DistContext, cfg: TrainConfig) -> Strategy:
    d = cfg.dist
    bucket_mb = d.bucket_mb if d.overlap else None
    return AllReduceStrategy(ctx, d.profile_sync, d.timeout, bucket_mb)


def _learner_actor(ctx: DistContext, cfg: TrainConfig) -> Strategy:
    side = Learner if ctx.rank < cfg.dist.learners else Actor
    return side(ctx, cfg)


def _elastic(ctx: DistContext, cfg: TrainConfig) -> Strategy:
    from distrl.distributed import elastic

    return elastic.build(ctx, cfg)


def _ps(mode: str, options: tuple[str, ...] = (), agreed: bool = True) -> StrategySpec:
    def build(ctx: DistContext, cfg: TrainConfig) -> Strategy:
        sinks = Tree(ctx.world_size, cfg.dist.ps.group_size).sinks
        side = PSServer if ctx.rank == SERVER else PSSink if ctx.rank in sinks else PSWorker
        return side(ctx, cfg, mode)

    lacks = {STATS_WHERE_WEIGHTS: _POPART_PS, WHOLE_LEARNER: _LEARNER_PS}
    lacks |= {} if agreed else {AGREED_STATS: _UNAGREED}
    return StrategySpec(
        build,
        (*options, "ps.group_size"),
        lacks,
        lambda d: max(2, 2 * d.ps.group_size),
        _ps_too_few,
        collectors=lambda d, world: len(Tree(world, d.ps.group_size).workers),
        fits=lambda d, world: tree_error(d.ps.group_size, world),
    )


STRATEGIES: dict[str, StrategySpec] = {
    "allreduce": StrategySpec(
        _allreduce, options=("profile_sync", "preempt_fraction", *_OVERLAP), every_rank_learns=True
    ),
    "elastic": StrategySpec(
        _elastic,
        options=("profile_sync",),
        lacks={WHOLE_EPISODES: _EPISODES_ELASTIC, SMALL_RANK_STATE: _REPLAY_ELASTIC},
        min_world=lambda d: 2,
        too_few=lambda d, world: (
            f"--dist.strategy elastic keeps training when one of several ranks is lost; it "
            f"needs at least 2 processes, got {world}; use distrl train --nproc N (N >= 2)"
        ),
        launcher="distrl.distributed.elastic_launch",
    ),
    "ps-bsp": _ps("bsp"),
    "ps-asp": _ps("asp", ("ps.staleness_lr",), agreed=False),
    "ps-bap": _ps("bap", ("ps.staleness", "ps.lifetime"), agreed=False),
    "learner-actor": StrategySpec(
        _learner_actor,
        ("learners", "sync", "max_policy_lag", "correction", *_OVERLAP),
        lacks={WHOLE_EPISODES: _EPISODES_LA},
        min_world=lambda d: 2 * d.learners,
        too_few=_la_too_few,
        off_policy=lambda d: d.sync == "async",
        collectors=lambda d, world: world - d.learners,
    ),
}


def _get(cfg: DistConfig, dotted: str) -> object:
    value: object = cfg
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def strategy_spec(name: str) -> StrategySpec:
    """The registry row of ``name``; an unknown one is refused naming the known ones."""
    spec = STRATEGIES.get(name)
    if spec is None:
        raise ValueError(f"--dist.strategy {name!r} is not one of {sorted(STRATEGIES)}")
    return spec


def check_strategy(cfg: TrainConfig, world_size: int) -> None:
    """Refuse, naming why, an unknown strategy, one with too few processes, or another
    strategy's options. Raises ValueError. (Which algorithms and algorithm options a strategy
    takes: ``runner.algorithms.check_compatible``.)"""
    name = cfg.dist.strategy
    spec = strategy_spec(name)
    why_not = _overlap_refusal(cfg.dist)
    if why_not:
        raise ValueError(why_not)
    defaults = DistConfig()
    if name == "elastic" and cfg.dist.preempt_fraction != defaults.preempt_fraction:
        raise ValueError(
            "--dist.preempt-fraction does not compose with --dist.strategy elastic: a rank lost "
            "mid-rollout makes the survivors redo the iteration with other members, and the "
            "store's count of ranks done would still hold the lost attempt's; use allreduce"
        )
    foreign: dict[str, list[str]] = {}  # option -> the strategies that read it
    for other, s in STRATEGIES.items():
        for opt in s.options:
            moved = _get(cfg.dist, opt) != _get(defaults, opt)
            if other != name and opt not in spec.options and moved:
                foreign.setdefault(opt, []).append(other)
    if foreign:
        given = ", ".join(
            f"--dist.{opt.replace('_', '-')} {_get(cfg.dist, opt)!r} (read by {', '.join(by)})"
            for opt, by in foreign.items()
        )
        raise ValueError(
            f"--dist.strategy {name} does not read {given}; drop the option or pick the "
            f"strategy that reads it"
        )
    if name == "learner-actor" and cfg.dist.sync != "async":
        for flag, value, default in (
            ("max-policy-lag", cfg.dist.max_policy_lag, defaults.max_policy_lag),
            ("correction", cfg.dist.correction, defaults.correction),
        ):
            if value != default:
                raise ValueError(
                    f"--dist.{flag} {value} is read only with --dist.sync async (on-policy "
                    f"actors always wait for the newest weights); add --dist.sync async"
                )
    need = spec.min_world(cfg.dist)
    if world_size < need:
        raise ValueError(spec.too_few(cfg.dist, world_size))
    why = spec.fits(cfg.dist, world_size)
    if why:
        raise ValueError(why)


def collectors(cfg: TrainConfig) -> int:
    """How many ranks of ``cfg``'s run on ``cfg.nproc * cfg.nnodes`` ranks collect env steps
    (its sides' ``num_collectors``)."""
    world = max(1, cfg.nproc * cfg.nnodes)
    return max(1, strategy_spec(cfg.dist.strategy).collectors(cfg.dist, world))


def launcher(strategy: str) -> Callable[..., int]:
    """What starts the ranks of ``distrl train --nproc N`` under ``strategy``: torchrun
    (``launch.launch``), or the strategy's own launcher (``StrategySpec.launcher``: elastic
    starts its rank processes itself, since torchrun's agent restarts every rank when one
    dies)."""
    module = strategy_spec(strategy).launcher or "distrl.distributed.launch"
    start: Callable[..., int] = importlib.import_module(module).launch
    return start


def make_strategy(cfg: TrainConfig, ctx: DistContext) -> Strategy:
    check_strategy(cfg, ctx.world_size if ctx.distributed else 1)
    return STRATEGIES[cfg.dist.strategy].build(ctx, cfg)
