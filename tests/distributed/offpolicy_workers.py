"""Rank functions for the off-policy equivalence test (run by tests.distributed.harness)."""

from __future__ import annotations

import dataclasses

import torch


def batch(update: int, slot: int, rows: int, obs_dim: int, actions: int) -> dict:
    """Slot ``slot``'s minibatch of update ``update``: fixed random transitions."""
    g = torch.Generator().manual_seed(1000 * update + slot)
    return {
        "obs": torch.randn(rows, obs_dim, generator=g),
        "actions": torch.randint(0, actions, (rows,), generator=g),
        "rewards": torch.randn(rows, generator=g),
        "next_obs": torch.randn(rows, obs_dim, generator=g),
        "terminated": torch.rand(rows, generator=g) < 0.1,
    }


def off_policy_equivalence(rank: int, world: int, algorithm: str, updates: int) -> dict:
    """``updates`` gradient steps of ``algorithm`` (dqn) on cartpole-shaped transitions: with
    world 2 each rank steps on its own minibatch, all-reduced; with world 1 the one process
    steps on both ranks' minibatches side by side. Returns the trained and target weights."""
    from distrl.config import DistConfig
    from distrl.distributed import context
    from distrl.distributed.strategies import make_strategy
    from distrl.envs.registry import make_env
    from distrl.runner.off_policy import OffPolicyRunner
    from tests.distributed.workers import small_config

    cfg = small_config(4, distributed=world > 1, lr_schedule="constant", learning_rate=1e-3)
    cfg = dataclasses.replace(cfg, algorithm=algorithm, dist=DistConfig(strategy="allreduce"))
    ctx = context.init(cfg)
    try:
        env = make_env(cfg, ctx.device)
        runner = OffPolicyRunner(cfg, make_strategy(cfg, ctx), env)
        learner, strategy = runner.learner, runner.strategy
        n = env.action_space.n
        for u in range(updates):
            slots = [rank] if world > 1 else [0, 1]
            parts = [batch(u, s, 32, env.obs_dim, n) for s in slots]
            mine = {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
            strategy.step(learner, learner.gradient(mine))
        state = learner.state_dict()
        return {
            "module": {k: v.clone() for k, v in learner.module.state_dict().items()},
            "keys": sorted(state),
        }
    finally:
        context.shutdown()
