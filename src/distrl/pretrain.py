"""`distrl pretrain <suite> --demos FILE`: behaviour cloning, the first half of RIPT's recipe
(imitate a few demonstrations, then RLOO with the success reward: ``train <suite> --init-from
RUN/checkpoints/bc.pt``).

The policy is the one ``train <suite>`` builds from the same overrides (so ``--init-from``
fits it): its observation normalizer is fitted to the demonstrations' observations, then the
actor's Gaussian is trained to maximize the log-likelihood of the expert's actions (the mean
follows the expert; the standard deviation shrinks to the expert's spread around it, which sets
how widely RLOO explores next), with Adam over shuffled minibatches of demonstration steps.

One process: the demonstrations of a suite are a few thousand steps (reach10, 5 per task: ~700),
a few seconds of training; the distributed, task-sharded version is not built.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import tyro

from distrl import checkpoint as ckpt
from distrl.config import TrainConfig, to_dict
from distrl.evaluation import evaluate_suite, suite_table
from distrl.policy import ActorCritic, Moments
from distrl.policy import distributions as D

BC_FILE = "bc.pt"


@dataclass(frozen=True)
class PretrainArgs:
    suite: tyro.conf.Positional[str]
    """The episodic suite the demonstrations are of (reach10, metaworld-mt10)."""
    demos: str
    """A `distrl demos` file."""
    run_dir: str | None = None
    """Where bc.pt goes (default runs/<suite>-bc/<timestamp>)."""
    epochs: int = 200
    """Passes over the demonstration steps."""
    batch_size: int = 256
    """Demonstration steps per Adam step."""
    learning_rate: float = 1e-3
    seed: int = 0
    eval_episodes: int = 50
    """Then evaluate the clone: per task, this many episodes from the held-out init states
    (50: every one once); 0 skips it."""


def bc_loss(policy: ActorCritic, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """Mean negative log-likelihood of ``actions`` [N, A] under the policy's Gaussian."""
    mean = policy.actor(policy.normalizer(obs))
    logp, _ = D.gaussian_logprob_entropy(mean, policy.log_std.expand_as(mean), actions)
    return -logp.mean()


def clone(
    cfg: TrainConfig,
    obs: torch.Tensor,
    actions: torch.Tensor,
    policy: ActorCritic,
    a: PretrainArgs,
    report=print,
) -> list[float]:
    """Fit ``policy``'s normalizer to ``obs``, then ``a.epochs`` of Adam on ``bc_loss``; returns
    the loss after each epoch (over all steps)."""
    if policy.discrete:
        raise ValueError(f"{cfg.task}: behaviour cloning here is for continuous actions")
    policy.normalizer.update(Moments.of(obs))
    opt = torch.optim.Adam(policy.parameters(), lr=a.learning_rate)
    g = torch.Generator().manual_seed(a.seed)
    n = obs.shape[0]
    losses = []
    for epoch in range(a.epochs):
        order = torch.randperm(n, generator=g)
        for i in range(0, n, a.batch_size):
            idx = order[i : i + a.batch_size]
            loss = bc_loss(policy, obs[idx], actions[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            losses.append(float(bc_loss(policy, obs, actions)))
        if epoch == 0 or (epoch + 1) % max(1, a.epochs // 10) == 0:
            report(f"bc: epoch {epoch + 1}/{a.epochs}, negative log-likelihood {losses[-1]:.3f}")
    return losses


def pretrain(a: PretrainArgs, overrides: list[str]) -> Path:
    """``distrl pretrain``: the policy ``train <suite> [overrides]`` would build, cloned from the
    demonstrations, saved as ``RUN/checkpoints/bc.pt``; returns its path."""
    from distrl.args import default_run_dir, parse_train_args
    from distrl.demos import demo_steps, load_demos
    from distrl.envs.registry import get_task

    cfg = parse_train_args([a.suite, *overrides])
    suite = get_task(cfg.task).suite
    if suite is None:
        raise ValueError(f"{cfg.task} is not an episodic suite; pretrain reach10 or metaworld-mt10")
    demos = load_demos(a.demos)
    if demos["suite"] != cfg.task:
        raise ValueError(f"--demos {a.demos} holds {demos['suite']} demonstrations, not {cfg.task}")
    for name, value in (("--epochs", a.epochs), ("--batch-size", a.batch_size)):
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    if a.eval_episodes < 0:
        raise ValueError(f"--eval-episodes must be 0 (skip) or more, got {a.eval_episodes}")
    if not (math.isfinite(a.learning_rate) and a.learning_rate > 0):
        raise ValueError(f"--learning-rate must be positive, got {a.learning_rate}")
    tasks = suite.select(cfg.multitask.tasks)
    obs, actions, used = demo_steps(demos, tuple(t for t in tasks if t in demos["tasks"]))
    if obs.shape[0] == 0:
        raise ValueError(f"--demos {a.demos}: no successful demonstration of {list(tasks)}")
    torch.manual_seed(a.seed)
    env = suite.make_task_env(tasks[0], 1, torch.device("cpu"), 1)
    try:
        policy = ActorCritic(env.obs_dim, env.action_space, cfg.policy)
    finally:
        env.close()
    run_dir = Path(a.run_dir) if a.run_dir else default_run_dir(f"{cfg.task}-bc")
    t0 = time.perf_counter()
    print(f"bc: {cfg.task}, {obs.shape[0]} steps from {sum(used.values())} demonstrations")
    losses = clone(cfg, obs, actions, policy, a)
    seconds = time.perf_counter() - t0
    state = {"policy": policy.state_dict(), "iteration": 0, "env_steps": 0, "wall_time": 0.0}
    meta = ckpt.run_metadata(to_dict(cfg), 1, 0)
    meta |= {"policy_only": True, "bc_loss": losses[-1], "demos": str(a.demos), "bc_used": used}
    if a.eval_episodes > 0:
        result = evaluate_suite(
            policy.eval(), suite, tasks, a.eval_episodes, "cpu", 64, cfg.env.max_episode_steps
        )
        print(suite_table(result, f"bc: {cfg.task}"))
        meta |= {"eval_success": result.mean, "eval_per_task": result.per_task}
    path = ckpt.save_checkpoint(run_dir / "checkpoints", 0, state, meta, name=BC_FILE)
    print(
        f"bc: {seconds:.1f} s of cloning; wrote {path}\n"
        f"    fine-tune: distrl train {cfg.task} --init-from {path}"
    )
    return path
