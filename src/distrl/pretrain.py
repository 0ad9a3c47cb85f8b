"""`distrl pretrain <suite> --demos FILE [--nproc N]`: behaviour cloning, the first half of
RIPT's recipe (imitate a few demonstrations, then RLOO with the success reward: ``train <suite>
--init-from RUN/checkpoints/bc.pt``).

The policy is the one ``train <suite>`` builds from the same overrides (so ``--init-from``
fits it): its observation normalizer is fitted to the demonstrations' observations, then the
actor's Gaussian is trained to maximize the log-likelihood of the expert's actions (the mean
follows the expert; the standard deviation shrinks to the expert's spread around it, which sets
how widely RLOO explores next), with Adam over shuffled minibatches of demonstration steps.

Distributed like training: the suite's tasks are sharded over the ranks as ``train`` shards
them (``task_schedule.task_shard``), each rank computes the loss on its tasks' steps only, and the
gradient goes through the run's strategy (``strategy.step``: one all-reduce per minibatch).
Every rank draws the same global order of all demonstration steps each epoch; a minibatch is a
slice of it, and rank r's loss is the sum over the slice's steps it holds divided by the slice's
size (times W, which the all-reduce's mean takes back), so W ranks take the steps one process
takes, on the same minibatches (tested: equal to float rounding). The normalizer's moments are
summed over the ranks the same way. Rank 0 writes ``bc.pt`` and evaluates it held-out.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import tyro

from distrl import checkpoint as ckpt
from distrl.algorithms.bc import bc_loss
from distrl.algorithms.ppo import PPO
from distrl.config import TrainConfig, to_dict
from distrl.evaluation import evaluate_suite, suite_table
from distrl.policy import ActorCritic, Moments

if TYPE_CHECKING:
    from distrl.distributed.base import Strategy
    from distrl.envs.episodic import EpisodicSuite

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
    """Demonstration steps per Adam step (all ranks together)."""
    learning_rate: float = 1e-3
    seed: int = 0
    eval_episodes: int = 50
    """Then evaluate the clone: per task, this many episodes from the held-out init states
    (50: every one once); 0 skips it."""
    nproc: int = 1
    """Ranks (torchrun, this machine); the tasks are sharded over them as in training."""


def bc_learner(policy: ActorCritic, learning_rate: float) -> PPO:
    """The flat-gradient Adam learner training uses, set for cloning: constant learning rate, no
    KL stop, no gradient clipping (``decide`` then only skips non-finite steps)."""
    from distrl.config import AgentConfig

    cfg = AgentConfig(
        learning_rate=learning_rate, lr_schedule="constant", target_kl=None,
        max_grad_norm=math.inf, adam_eps=1e-8,
    )  # fmt: skip
    return PPO(policy, cfg)


def clone(
    obs: torch.Tensor,
    actions: torch.Tensor,
    mine: torch.Tensor,
    policy: ActorCritic,
    strategy: Strategy,
    a: PretrainArgs,
    report=print,
) -> list[float]:
    """Behaviour cloning on every rank: ``obs``/``actions`` [S, ...] are all the demonstration
    steps, ``mine`` [S] bool the ones of this rank's tasks. Fits the normalizer to all steps,
    then ``a.epochs`` of Adam on ``bc_loss`` (module docstring); returns the loss over all steps
    after each epoch (agreed: summed over ranks)."""
    if policy.categorical:
        raise ValueError("behaviour cloning here is for continuous actions")
    W = strategy.world_size
    moments = Moments.of(obs[mine]).to_flat() if bool(mine.any()) else _no_moments(obs)
    agreed = strategy.reduce_stats(sums={"obs": moments}).sums["obs"]
    policy.normalizer.update(Moments.from_flat_sum(agreed))
    learner = bc_learner(policy, a.learning_rate)
    strategy.setup(policy, learner)
    g = torch.Generator().manual_seed(a.seed)
    own_obs, own_actions = obs[mine], actions[mine]
    position = torch.full((obs.shape[0],), -1, dtype=torch.long)  # global step -> own row
    position[mine] = torch.arange(int(mine.sum()))
    zero = torch.zeros(())
    losses = []
    for epoch in range(a.epochs):
        order = torch.randperm(obs.shape[0], generator=g)
        for idx in order.split(a.batch_size):
            rows = position[idx]
            rows = rows[rows >= 0]
            loss = bc_loss(policy, own_obs[rows], own_actions[rows], "sum") * (W / idx.numel())
            parts = dict.fromkeys(("approx_kl", "pg_loss", "v_loss", "entropy", "clipfrac"), zero)
            strategy.step(learner, learner.backward(loss, parts))
        with torch.no_grad():
            total = bc_loss(policy, own_obs, own_actions, "sum").reshape(1).double()
        summed = strategy.reduce_stats(sums={"nll": total}).sums["nll"]
        losses.append(float(summed) / obs.shape[0])
        if epoch == 0 or (epoch + 1) % max(1, a.epochs // 10) == 0:
            report(f"bc: epoch {epoch + 1}/{a.epochs}, negative log-likelihood {losses[-1]:.3f}")
    return losses


def _no_moments(obs: torch.Tensor) -> torch.Tensor:
    """The flat moments of no observations (a rank without tasks adds nothing)."""
    return torch.zeros(1 + 2 * obs.shape[1], dtype=torch.float64)


def check(a: PretrainArgs, overrides: list[str]) -> tuple[TrainConfig, dict]:
    """The config ``train <suite> [overrides]`` builds and the demonstrations, checked before
    anything starts."""
    from distrl.args import parse_train_args
    from distrl.demos import load_demos
    from distrl.distributed.strategies import strategy_spec
    from distrl.envs.registry import get_task

    cfg = parse_train_args([a.suite, *overrides])
    if get_task(cfg.task).suite is None:
        raise ValueError(f"{cfg.task} is not an episodic suite; pretrain reach10 or metaworld-mt10")
    for name, value in (("--epochs", a.epochs), ("--batch-size", a.batch_size),
                        ("--nproc", a.nproc)):  # fmt: skip
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    if a.eval_episodes < 0:
        raise ValueError(f"--eval-episodes must be 0 (skip) or more, got {a.eval_episodes}")
    if not (math.isfinite(a.learning_rate) and a.learning_rate > 0):
        raise ValueError(f"--learning-rate must be positive, got {a.learning_rate}")
    if not strategy_spec(cfg.dist.strategy).every_rank_learns:
        raise ValueError(
            f"pretrain combines gradients by all-reduce; --dist.strategy {cfg.dist.strategy} "
            f"is for training (fine-tune with it: train --init-from bc.pt --dist.strategy ...)"
        )
    demos = load_demos(a.demos)
    if demos["suite"] != cfg.task:
        raise ValueError(f"--demos {a.demos} holds {demos['suite']} demonstrations, not {cfg.task}")
    return cfg, demos


def launch_ranks(a: PretrainArgs, overrides: list[str]) -> Path:
    """``--nproc N``: the same command on N ranks under torchrun; the path of bc.pt."""
    from distrl.args import default_run_dir
    from distrl.distributed import launch

    run_dir = a.run_dir or str(default_run_dir(f"{a.suite}-bc"))
    args = ["pretrain", a.suite, "--demos", a.demos, "--run-dir", run_dir]
    for f in dataclasses.fields(PretrainArgs):
        if f.name not in ("suite", "demos", "run_dir", "nproc"):
            args += [f"--{f.name.replace('_', '-')}", str(getattr(a, f.name))]
    args += ["--", *overrides, "--distributed", "True"]
    code = launch.launch(a.nproc, 0, args)
    if code != 0:
        raise RuntimeError(f"pretrain on {a.nproc} ranks failed (torchrun exit {code})")
    return Path(run_dir) / "checkpoints" / BC_FILE


def pretrain(a: PretrainArgs, overrides: list[str]) -> Path:
    """``distrl pretrain``: the policy ``train <suite> [overrides]`` would build, cloned from the
    demonstrations, saved as ``RUN/checkpoints/bc.pt``; returns its path."""
    from distrl.algorithms.task_schedule import task_shard
    from distrl.distributed import context, launch
    from distrl.distributed.strategies import make_strategy
    from distrl.envs.registry import get_task

    cfg, demos = check(a, overrides)
    if a.nproc > 1 and not launch.under_torchrun():
        return launch_ranks(a, overrides)
    suite = get_task(cfg.task).suite
    assert suite is not None
    tasks = tuple(t for t in suite.select(cfg.multitask.tasks) if t in demos["tasks"])
    if not tasks:
        raise ValueError(f"--demos {a.demos}: no demonstrations of {list(cfg.multitask.tasks)}")
    ctx = context.init(cfg)
    clean = False
    try:
        strategy = make_strategy(cfg, ctx)
        W = strategy.world_size
        shard = set(task_shard(strategy.collector_index, len(tasks), W))
        obs, actions, used, task_of = _steps(demos, tasks)
        if obs.shape[0] == 0:
            raise ValueError(f"--demos {a.demos}: no successful demonstration of {list(tasks)}")
        mine = torch.tensor([t in shard for t in task_of.tolist()], dtype=torch.bool)
        torch.manual_seed(a.seed)
        env = suite.make_task_env(tasks[0], 1, torch.device("cpu"), 1)
        try:
            policy = ActorCritic.for_env(env, cfg.policy)
        finally:
            env.close()
        run_dir = Path(a.run_dir) if a.run_dir else _default_dir(cfg)
        report = print if ctx.is_main else (lambda _: None)
        report(f"bc: {cfg.task}, {obs.shape[0]} steps from {sum(used.values())} demonstrations"
               f", {W} rank(s)")  # fmt: skip
        t0 = time.perf_counter()
        losses = clone(obs, actions, mine, policy, strategy, a, report)
        seconds = time.perf_counter() - t0
        path = run_dir / "checkpoints" / BC_FILE
        if ctx.is_main:
            path = _save(cfg, policy, run_dir, losses, a, used, W, seconds, suite, tasks)
        clean = True
        return path
    finally:
        context.shutdown(clean)


def _steps(
    demos: dict, tasks: tuple[str, ...]
) -> tuple[torch.Tensor, torch.Tensor, dict[str, int], torch.Tensor]:
    """All demonstration steps of ``tasks`` (suite order) and the task index of each."""
    from distrl.demos import demo_steps

    obs, actions, used = demo_steps(demos, tasks)
    counts = [int(d["lengths"][d["success"]].sum()) for d in (demos["data"][t] for t in tasks)]
    task_of = torch.repeat_interleave(torch.arange(len(tasks)), torch.tensor(counts))
    return obs, actions, used, task_of


def _default_dir(cfg: TrainConfig) -> Path:
    from distrl.args import default_run_dir

    return default_run_dir(f"{cfg.task}-bc")


def _save(
    cfg: TrainConfig,
    policy: ActorCritic,
    run_dir: Path,
    losses: list[float],
    a: PretrainArgs,
    used: dict[str, int],
    world: int,
    seconds: float,
    suite: EpisodicSuite,
    tasks: tuple[str, ...],
) -> Path:
    """Rank 0: bc.pt (policy only) with the clone's held-out success in its manifest."""
    state = {"policy": policy.state_dict(), "iteration": 0, "env_steps": 0, "wall_time": 0.0}
    meta = ckpt.run_metadata(to_dict(cfg), world, 0)
    meta |= {"policy_only": True, "bc_loss": losses[-1], "demos": str(a.demos), "bc_used": used}
    meta |= {"bc_seconds": round(seconds, 3)}
    if a.eval_episodes > 0:
        result = evaluate_suite(
            policy.eval(), suite, tasks, a.eval_episodes, "cpu", 64, cfg.env.max_episode_steps
        )
        print(suite_table(result, f"bc: {cfg.task}"))
        meta |= {"eval_success": result.mean, "eval_per_task": result.per_task}
    path = ckpt.save_checkpoint(run_dir / "checkpoints", 0, state, meta, name=BC_FILE)
    print(
        f"bc: {seconds:.1f} s of cloning on {world} rank(s); wrote {path}\n"
        f"    fine-tune: distrl train {cfg.task} --init-from {path}"
    )
    return path
