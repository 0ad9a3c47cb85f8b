"""``--dist.strategy`` name -> strategy; the runner is handed the result and never builds one."""

from __future__ import annotations

from distrl.config import TrainConfig
from distrl.distributed.allreduce import AllReduceStrategy
from distrl.distributed.base import Strategy
from distrl.distributed.context import DistContext
from distrl.distributed.learner_actor import LearnerActor
from distrl.distributed.param_server import ParameterServer


def _allreduce(ctx: DistContext, cfg: TrainConfig) -> Strategy:
    return AllReduceStrategy(ctx, profile_sync=cfg.dist.profile_sync, timeout=cfg.dist.timeout)


def _ps(mode: str):
    def build(ctx: DistContext, cfg: TrainConfig) -> Strategy:
        return ParameterServer(ctx, cfg, mode)

    return build


STRATEGIES = {
    "allreduce": _allreduce,
    "ps-bsp": _ps("bsp"),
    "ps-asp": _ps("asp"),
    "ps-bap": _ps("bap"),
    "learner-actor": lambda ctx, cfg: LearnerActor(ctx, cfg),
}


def make_strategy(cfg: TrainConfig, ctx: DistContext) -> Strategy:
    try:
        build = STRATEGIES[cfg.dist.strategy]
    except KeyError:
        raise ValueError(
            f"--dist.strategy {cfg.dist.strategy!r} is not one of {sorted(STRATEGIES)}"
        ) from None
    return build(ctx, cfg)
