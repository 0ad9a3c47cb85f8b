"""``--dist.strategy`` name -> strategy; the runner is handed the result and never builds one.

Adding a strategy is a class in its own file (the ``Strategy`` protocol of
``distributed/base.py``: its roles, ``run`` for their loops, ``step``, ``reduce_stats``; most
inherit the timed collectives of ``Collectives``) plus one ``STRATEGIES`` line naming how to
build it, which ``--dist`` options only it reads, and which algorithms it cannot run (with the
reason). ``tests/distributed/test_strategies.py`` adds one that way.

``check_strategy`` runs before any process group exists (``distrl train`` checks it before
torchrun starts, ``make_strategy`` again inside each rank): a strategy given options that only
another strategy reads, or paired with an algorithm it cannot run, is refused with the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from distrl.config import DistConfig, TrainConfig
from distrl.distributed import context
from distrl.distributed.allreduce import AllReduceStrategy
from distrl.distributed.base import Strategy
from distrl.distributed.context import DistContext
from distrl.distributed.learner_actor import LearnerActor
from distrl.distributed.param_server import ParameterServer

ON_POLICY, EPISODIC = "on-policy PPO", "episodic RLOO"
POPART = "on-policy PPO with PopArt"


@dataclass(frozen=True)
class StrategySpec:
    build: Callable[[DistContext, TrainConfig], Strategy]
    options: tuple[str, ...] = ()
    """``--dist`` fields (dotted below ``dist``) that only this strategy reads."""
    refuses: tuple[tuple[str, str], ...] = ()
    """(algorithm, why) pairs this strategy cannot run."""


_EPISODIC_LA = (
    EPISODIC,
    "its actors ship fixed-length rollouts to the learners, and episodic batches are whole "
    "episodes of varying length per task; use --dist.strategy allreduce",
)


_POPART_PS = (
    POPART,
    "PopArt rescales the critic's output layer when the agreed value-target statistics move, and "
    "under a parameter server the weights live on the server while the workers agree on the "
    "statistics; use --dist.strategy allreduce or learner-actor, or --policy.popart-tasks 0",
)


def _allreduce(ctx: DistContext, cfg: TrainConfig) -> Strategy:
    return AllReduceStrategy(ctx, profile_sync=cfg.dist.profile_sync, timeout=cfg.dist.timeout)


def _ps(mode: str) -> Callable[[DistContext, TrainConfig], Strategy]:
    def build(ctx: DistContext, cfg: TrainConfig) -> Strategy:
        return ParameterServer(ctx, cfg, mode)

    return build


STRATEGIES: dict[str, StrategySpec] = {
    "allreduce": StrategySpec(_allreduce, options=("profile_sync",)),
    "ps-bsp": StrategySpec(_ps("bsp"), refuses=(_POPART_PS,)),
    "ps-asp": StrategySpec(_ps("asp"), ("ps.staleness_lr",), refuses=(_POPART_PS,)),
    "ps-bap": StrategySpec(_ps("bap"), ("ps.staleness", "ps.lifetime"), refuses=(_POPART_PS,)),
    "learner-actor": StrategySpec(
        LearnerActor, ("learners", "sync", "max_policy_lag", "correction"), refuses=(_EPISODIC_LA,)
    ),
}


def _get(cfg: DistConfig, dotted: str) -> object:
    value: object = cfg
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def check_strategy(cfg: TrainConfig, world_size: int, episodic: bool = False) -> None:
    """Refuse, naming why, an unknown strategy, one with too few processes, another strategy's
    options, or an algorithm this strategy cannot run (``episodic``: the task has an episodic
    suite and trains with RLOO). Raises ValueError."""
    name = cfg.dist.strategy
    spec = STRATEGIES.get(name)
    if spec is None:
        raise ValueError(f"--dist.strategy {name!r} is not one of {sorted(STRATEGIES)}")
    defaults = DistConfig()
    foreign = [
        (opt, other)
        for other, s in STRATEGIES.items()
        if other != name
        for opt in s.options
        if opt not in spec.options and _get(cfg.dist, opt) != _get(defaults, opt)
    ]
    if foreign:
        given = ", ".join(
            f"--dist.{opt.replace('_', '-')} {_get(cfg.dist, opt)!r} (read by {other})"
            for opt, other in foreign
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
    algorithm = EPISODIC if episodic else POPART if cfg.policy.popart_tasks else ON_POLICY
    for refused, why in spec.refuses:
        if refused == algorithm:
            raise ValueError(
                f"{cfg.task} trains with {algorithm}, which --dist.strategy {name} cannot run: "
                f"{why}"
            )
    context.check_strategy(cfg, world_size)


def make_strategy(cfg: TrainConfig, ctx: DistContext, episodic: bool = False) -> Strategy:
    check_strategy(cfg, ctx.world_size if ctx.distributed else 1, episodic)
    return STRATEGIES[cfg.dist.strategy].build(ctx, cfg)
