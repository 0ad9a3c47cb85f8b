"""Functions run inside spawned ranks for the episodic multi-task tests."""

from __future__ import annotations

import dataclasses
from typing import Any

from distrl.config import AgentConfig, EnvConfig, MultiTaskConfig, TrainConfig
from distrl.envs.reach import TASK_NAMES


def tiny_config(num_tasks: int, world: int, **multitask: Any) -> TrainConfig:
    """A Reach subset of ``num_tasks`` tasks, 4 envs, 8 episodes of at most 20 steps."""
    m = dict(tasks=TASK_NAMES[:num_tasks], data_batch_size=8, group_size=4)
    m.update(multitask)
    return TrainConfig(
        task="reach10",
        env=EnvConfig(num_envs=4, max_episode_steps=20),
        agent=AgentConfig(
            num_epochs=2,
            num_minibatches=2,
            learning_rate=3e-3,
            lr_schedule="constant",
            vf_coef=0.0,
            max_iterations=2,
            save_interval=1000,
        ),
        multitask=MultiTaskConfig(**m),
        distributed=world > 1,
        tensorboard=False,
        progress=False,
        threads=1,
    )


def episodic_run(rank: int, world: int, num_tasks: int, iterations: int, multitask: dict) -> dict:
    """EpisodicRunner.learn() for ``iterations``; every rank reports what it trained on, the
    metrics it computed, its parameters and optimizer state."""
    import torch

    from distrl.distributed import context
    from distrl.distributed.strategies import make_strategy
    from distrl.envs.registry import get_task
    from distrl.runner.episodic import EpisodicRunner
    from distrl.runner.hooks import Hooks
    from tests.distributed.workers import replica

    cfg = tiny_config(num_tasks, world, **multitask)
    cfg = dataclasses.replace(cfg, agent=dataclasses.replace(cfg.agent, max_iterations=iterations))
    seen: list[dict] = []

    class Record(Hooks):
        def before_update(self, runner) -> None:
            b, policy = runner.batch, runner.policy
            with torch.no_grad():  # the draws behind the actions: the policy is as it collected
                mean = policy.actor(policy.normalizer(b.obs))
                draws = (b.actions - mean) / policy.log_std.exp()
            seen.append(
                {
                    "iteration": runner.iteration,
                    "task": runner.task,
                    "episodes": b.num_episodes,
                    "init": b.init_indices.tolist(),
                    "draws": draws,
                    "mask": b.mask,
                    "success": b.success.clone(),
                    "obs": b.obs.clone(),
                    "actions": b.actions.clone(),
                }
            )

        def after_update(self, runner, metrics) -> None:
            seen[-1]["metrics"] = dict(metrics)
            seen[-1]["own"] = {t: (o.clone(), a.clone()) for t, (o, a) in runner.own.items()}

    ctx = context.init(cfg)
    try:
        strategy = make_strategy(cfg, ctx)
        runner = EpisodicRunner(cfg, strategy, get_task("reach10").suite, hooks=[Record()])
        runner.learn()  # ends with strategy.verify_replicas
        return {
            "iteration": runner.iteration,
            "streak": runner.streak,
            "seen": seen,
            **replica(runner.policy, runner.ppo.optimizer),
        }
    finally:
        context.shutdown()


def episodic_train(
    rank: int, world: int, num_tasks: int, top: dict, agent: dict, multitask: dict | None = None
) -> dict:
    """``run_training`` (the CLI's rank entry point) on the tiny config."""
    from distrl.session import run_training

    cfg = tiny_config(num_tasks, world, **(multitask or {}))
    cfg = dataclasses.replace(cfg, agent=dataclasses.replace(cfg.agent, **agent), **top)
    final = run_training(cfg)
    return {"iteration": final.get("iteration")}
