"""A strategy written the way the architecture says to add one: one class, one registry line.

Local SGD with parameter averaging (Stich 2019, "Local SGD Converges Fast and Communicates
Little"): each rank steps its own optimizer on its own gradient, and after every minibatch the
ranks average their parameters in one all-reduce. It needs nothing of distrl's internals beyond
the ``Strategy`` protocol: the timed collectives and the defaults of a strategy whose every rank
collects and learns (its loop is the runner's ``train()``) come from ``Collectives``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from distrl.algorithms.ppo import Decision, GradientLearner
from distrl.config import TrainConfig
from distrl.distributed.collectives import Collectives
from distrl.distributed.context import DistContext
from distrl.distributed.strategies import STRATEGIES, StrategySpec


class LocalSGD(Collectives):
    name = "local-sgd"

    def __init__(self, ctx: DistContext, cfg: TrainConfig):
        super().__init__(ctx, timeout=cfg.dist.timeout)

    def setup(self, policy: nn.Module, learner: GradientLearner) -> None:
        self.broadcast_tensors_(list(policy.parameters()) + list(policy.buffers()))

    def step(self, learner: GradientLearner, flat: torch.Tensor) -> Decision:
        decision = learner.decide(flat)  # this rank's own gradient and KL
        if decision.action == "step":
            learner.apply()
        params = learner.flat_param.data
        self.allreduce_sum_(params)
        params.div_(self.world_size)
        return decision

    def verify_replicas(self, module: nn.Module) -> None:
        """Parameters are averaged after every minibatch; checked by the test, not here."""


def register() -> None:
    STRATEGIES["local-sgd"] = StrategySpec(LocalSGD)  # the one registry line


def train_local_sgd(rank: int, world: int, run_dir: str) -> dict:
    """``run_training`` (the CLI's rank life) under the example strategy; returns the final
    record and this rank's parameters after the last iteration."""
    import dataclasses

    from distrl import Hooks
    from distrl.config import DistConfig
    from distrl.session import run_training
    from tests.distributed.workers import small_config

    register()
    seen: dict[str, Any] = {}

    class Params(Hooks):
        def after_iteration(self, runner: Any, record: dict[str, Any]) -> None:
            seen["params"] = torch.cat([p.detach().reshape(-1) for p in runner.policy.parameters()])

    cfg = small_config(16, distributed=True, max_iterations=3)
    cfg = dataclasses.replace(cfg, dist=DistConfig(strategy="local-sgd"), run_dir=run_dir)  # type: ignore[arg-type]
    final = run_training(cfg, hooks=[Params()])
    return {"final": final, "params": seen["params"]}
