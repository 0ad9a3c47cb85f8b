"""`distrl play <run-dir|checkpoint> --episodes N`: evaluate the deterministic policy (every env
runs its share of the episodes to the end: ``distrl.evaluation``); for an episodic suite, each
task's success from its held-out init states (``evaluate_suite``); `--json FILE` writes the
figures; `--video out.mp4`: record one such episode, rendered offscreen (``distrl.render``)."""

from __future__ import annotations

import dataclasses
import json
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
import tyro

from distrl.config import TrainConfig
from distrl.envs.registry import get_task
from distrl.evaluation import evaluate, evaluate_suite, film, suite_table, task_env
from distrl.rundir import load, make_policy
from distrl.safe_files import replace_text


@dataclass(frozen=True)
class PlayArgs:
    path: tyro.conf.Positional[str]
    """A run directory (its newest valid checkpoint is used) or a checkpoint file."""
    episodes: int | None = None
    """Complete episodes to run (default 10; --video records one). Episodic suites: per task,
    from init states 0, 1, ... (default 50: every held-out state once)."""
    num_envs: int | None = None
    """Parallel envs (default: min(episodes, 64); --video steps one)."""
    seed: int = 12345
    """Env seed (different from training seeds by default)."""
    device: str = "cpu"
    """Torch device (cpu, cuda, cuda:K), or auto: the GPU when there is one."""
    video: str | None = None
    """Record one episode (env seed --seed) to this .mp4 file instead of evaluating:
    cartpole, cartpole-novel, acrobot, pendulum, the minatar-* grids, the MuJoCo tasks and
    gym:<Id> tasks that render rgb_array (docs/training.md); needs the video extra."""
    init_states: Literal["held-out", "train"] = "held-out"
    """Episodic suites: start from each task's held-out init states (what the field reports) or
    from the training ones."""
    json: str | None = None
    """Also write the figures (per episode; per task for a suite) to this JSON file."""
    tasks: tuple[str, ...] | None = None
    """Episodic suites: the tasks to evaluate (default: those the run trained, its
    --multitask.tasks); 'all' for every task of the suite."""
    max_episode_steps: int | None = None
    """Episodic suites: the episodes' time limit (default: the run's training limit, its
    --env.max-episode-steps); e.g. 500 scores a run trained on shorter episodes on Meta-World's."""


def play(args: PlayArgs) -> torch.Tensor:
    """Evaluate (or, with ``--video``, record) and print; returns the episodes' returns."""
    from distrl.distributed.context import check_device, pick_device

    check_device(args.device)
    args = dataclasses.replace(args, device=str(pick_device(args.device, 0)))  # auto: GPU if any
    if args.num_envs is not None and args.num_envs < 1:
        raise ValueError(f"--num-envs must be at least 1, got {args.num_envs}; or leave it unset")
    if args.video is not None:
        return record(args, args.video)
    episodes = 10 if args.episodes is None else args.episodes
    if episodes < 1:
        raise ValueError(f"--episodes must be at least 1, got {episodes}")
    if args.max_episode_steps is not None and args.max_episode_steps < 1:
        raise ValueError(f"--max-episode-steps must be at least 1, got {args.max_episode_steps}")
    device = torch.device(args.device)
    cfg, state, path, manifest = load(args.path, device)
    if get_task(cfg.task).evaluation_suite is not None:  # MT10's PPO too: per-task success
        return play_suite(args, cfg, state, path, manifest)
    for flag, value in (("--tasks", args.tasks), ("--max-episode-steps", args.max_episode_steps)):
        if value is not None:
            raise ValueError(f"{flag} applies to the episodic suites, not to {cfg.task}; drop it")
    env = task_env(cfg, args.num_envs or min(episodes, 64), device)
    with closing(env):
        result = evaluate(make_policy(env, cfg, state), env, episodes, args.seed)
    print(
        f"{cfg.task}: {episodes} episodes, return {result.mean:.2f} ± {result.std:.2f}, length "
        f"{result.length_mean:.1f} (checkpoint {path}, iteration "
        f"{manifest['iteration']})"
    )
    write_json(args.json, cfg, path, manifest, {"returns": result.returns.tolist(),
               "lengths": result.lengths.tolist(), "return_mean": result.mean})  # fmt: skip
    best_hint(path)
    return result.returns


def best_hint(played: Path) -> None:
    """Say so when the run keeps a ``best.pt`` (``--eval.interval``) other than the file
    played: the newest checkpoint is not always the best one."""
    best = played.parent / "best.pt"
    if played.name == "best.pt" or not best.is_file():
        return
    from distrl.checkpoint import read_manifest

    try:
        m = read_manifest(best)
    except ValueError:
        return
    score = m.get("eval_return_mean", m.get("eval_score"))
    shown = f", evaluation return {score:.2f}" if isinstance(score, int | float) else ""
    print(f"the run keeps best.pt (iteration {m['iteration']}{shown}): distrl play {best}")


def play_suite(
    args: PlayArgs, cfg: TrainConfig, state: dict[str, Any], path: Path, manifest: dict
) -> torch.Tensor:
    """Per-task success of an episodic suite's policy (or a PPO policy of the suite's tasks:
    ``Task.held_out_suite``); returns it [tasks]."""
    suite = get_task(cfg.task).evaluation_suite
    assert suite is not None
    device = torch.device(args.device)
    if args.tasks is None:
        tasks = suite.select(cfg.multitask.tasks)
    else:
        tasks = suite.select(() if args.tasks == ("all",) else args.tasks, "--tasks")
    episodes = 50 if args.episodes is None else args.episodes
    limit = args.max_episode_steps or cfg.env.max_episode_steps
    probe = suite.make_task_env(tasks[0], 1, device, limit)
    with closing(probe):
        policy = make_policy(probe, cfg, state)
    held_out = args.init_states == "held-out"
    result = evaluate_suite(
        policy, suite, tasks, episodes, device, args.num_envs or 64, limit, args.seed, held_out,
    )  # fmt: skip
    print(suite_table(result, f"{cfg.task} (checkpoint {path}, iteration {manifest['iteration']})"))
    write_json(args.json, cfg, path, manifest, {
        "init_states": args.init_states, "episodes_per_task": episodes, "max_episode_steps": limit,
        "success": result.mean, "per_task": result.per_task,
    })  # fmt: skip
    return torch.tensor(list(result.per_task.values()))


def write_json(
    out: str | None, cfg: TrainConfig, path: Path, manifest: dict, figures: dict[str, Any]
) -> None:
    if out is None:
        return
    doc = {"task": cfg.task, "checkpoint": str(path), "iteration": manifest["iteration"]}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    replace_text(out, json.dumps(doc | figures, indent=1) + "\n")  # a link there: replaced


def record(args: PlayArgs, video: str) -> torch.Tensor:
    """One episode of one env, seeded ``args.seed``, rendered to ``video`` (the ``--video``
    path); the return is the one ``evaluate`` gives that env and seed (``before_step`` only
    reads the state)."""
    from distrl import render

    if args.episodes not in (None, 1) or args.num_envs not in (None, 1):
        raise ValueError("--video records one episode of one env; drop --episodes/--num-envs")
    if Path(video).suffix.lower() != ".mp4":
        raise ValueError(f"--video writes an mp4 file; give a path ending in .mp4: {video}")
    render.headless_gl()  # before anything imports mujoco
    device = torch.device(args.device)
    cfg, state, path, manifest = load(args.path, device)
    n, fps, ret = film(
        cfg.task,
        cfg.env.max_episode_steps,
        device,
        lambda env: make_policy(env, cfg, state),
        video,
        args.seed,
    )
    print(
        f"{cfg.task}: video {video}, {n} frames at {fps:g} fps, return {ret:.2f} (seed "
        f"{args.seed}, checkpoint {path}, iteration {manifest['iteration']})"
    )
    return torch.tensor([ret])
