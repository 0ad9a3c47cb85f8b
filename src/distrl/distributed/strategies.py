"""``--dist.strategy`` name -> strategy; the runner is handed the result and never builds one."""

from __future__ import annotations

from distrl.config import TrainConfig
from distrl.distributed.allreduce import AllReduceStrategy
from distrl.distributed.base import Strategy
from distrl.distributed.context import DistContext

STRATEGIES: dict[str, type] = {"allreduce": AllReduceStrategy}


def make_strategy(cfg: TrainConfig, ctx: DistContext) -> Strategy:
    try:
        cls = STRATEGIES[cfg.dist.strategy]
    except KeyError:
        raise ValueError(
            f"--dist.strategy {cfg.dist.strategy!r} is not one of {sorted(STRATEGIES)}"
        ) from None
    return cls(ctx, profile_sync=cfg.dist.profile_sync, timeout=cfg.dist.timeout)
