"""`distrl bench solve`: training wall time until `episode_return_mean` reaches a target, per
seed, one process each; the median over seeds is the figure we quote."""

from __future__ import annotations

import shutil
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import common
from benchmarks.runs import PYTHON_CLI, quiet_train_args
from distrl.telemetry import read_metrics

# task -> target return: Gymnasium's own thresholds where it defines one; for the MuJoCo tasks
# CleanRL's published PPO mean return after 1M steps (ppo_continuous_action, its docs' table);
# for MinAtar the returns of gymnax's PPO checkpoints after 10M steps (its README: an MLP
# policy, no sticky actions; it lists none for Seaquest)
DEFAULT_TARGETS = {
    "cartpole": 475.0,
    "gym:CartPole-v1": 475.0,
    "pendulum": -200.0,
    "gym:Pendulum-v1": -200.0,
    "acrobot": -100.0,
    "halfcheetah": 1442.0,
    "hopper": 2383.0,
    "walker2d": 2288.0,
    "minatar-asterix": 15.0,
    "minatar-breakout": 28.0,
    "minatar-freeway": 58.0,
    "minatar-space-invaders": 131.0,
}


@dataclass(frozen=True)
class SolveArgs:
    tasks: tuple[str, ...] = ("cartpole", "gym:CartPole-v1", "pendulum")
    """Tasks to train with their default configs."""
    seeds: int = 5
    """Seeds per task (one process each)."""
    target: tuple[float, ...] = ()
    """Target return per task (default: 475 for CartPole, -200 for Pendulum, CleanRL's 1M-step
    returns for halfcheetah 1442, hopper 2383, walker2d 2288)."""
    threads: int = 1
    """Intra-op threads."""
    out: str | None = None
    """Results directory (default bench_out/solve)."""
    extra: tuple[str, ...] = ()
    """Extra overrides passed to every `train` (e.g. --agent.max-iterations 300)."""


def first_at_target(records: list[dict], target: float) -> dict | None:
    """The first iteration's record whose return mean reaches ``target``."""
    for r in records:
        ret = r.get("episode_return_mean")
        if ret is not None and ret >= target:
            return r
    return None


def return_at(records: list[dict], mark: int, window: float = 0.02) -> float | None:
    """The return at ``mark`` env steps: the mean of ``episode_return_mean`` over the iteration
    records whose env steps lie in the last ``window`` of the mark (``mark * (1 - window)`` to
    ``mark``); when none lies there (iterations larger than the window), the last record before
    the mark. None when the run logged no return by then, or ended before the window."""
    lo = mark * (1.0 - window)
    if not records or records[-1]["env_steps"] < lo:
        return None
    known = [
        r for r in records if r["env_steps"] <= mark and r.get("episode_return_mean") is not None
    ]
    if not known:
        return None
    vals = [float(r["episode_return_mean"]) for r in known if r["env_steps"] >= lo]
    return statistics.fmean(vals) if vals else float(known[-1]["episode_return_mean"])


def time_to_target(records: list[dict], target: float) -> tuple[float | None, int | None]:
    """(wall_time, env_steps) of the first iteration whose return mean reaches ``target``."""
    r = first_at_target(records, target)
    return (None, None) if r is None else (float(r["wall_time"]), int(r["env_steps"]))


def run_seed(
    task: str, seed: int, run_dir: Path, extra: list[str], threads: int
) -> tuple[list[dict], float]:
    """The run's metrics records and the time.time() just before its command started. A run
    left in ``run_dir`` by an earlier ``bench solve`` is deleted first (``distrl train`` refuses a
    run directory that holds a run)."""
    if run_dir.exists():
        shutil.rmtree(run_dir)
    cmd = [
        *PYTHON_CLI,
        "train",
        task,
        "--seed",
        str(seed),
        "--run-dir",
        str(run_dir),
        *quiet_train_args(threads),
        *extra,
    ]
    launched = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return read_metrics(run_dir / "metrics.jsonl"), launched


def solve(a: SolveArgs) -> list[dict]:
    m = common.header("distrl bench solve")
    out = common.out_dir(a.out, "solve")
    per_run, summary = [], []
    for i, task in enumerate(a.tasks):
        target = task_target(a, i, task)
        runs = [solve_seed(a, task, target, seed, out) for seed in range(a.seeds)]
        per_run += runs
        summary.append({**summarize_task(a, task, target, runs), **machine_columns(m)})
    common.write_csv(out / "per_run.csv", per_run)
    common.write_csv(out / "summary.csv", summary)
    common.print_table(
        "time to target (training wall time; from the command, start-up included)",
        summary,
        [
            "task",
            "target",
            "reached",
            "median_time_s",
            "median_command_to_target_s",
            "min_time_s",
            "max_time_s",
            "median_steps",
            "median_final_return",
        ],
    )
    return summary


def task_target(a: SolveArgs, i: int, task: str) -> float:
    """--target's i-th value, else the task's default."""
    target = a.target[i] if i < len(a.target) else DEFAULT_TARGETS.get(task)
    if target is None:
        raise ValueError(f"no default target for {task}; pass --target")
    return target


def solve_seed(a: SolveArgs, task: str, target: float, seed: int, out: Path) -> dict:
    """One seed trained to the end: when it reached ``target`` and where it finished."""
    run_dir = out / task.replace(":", "_") / f"seed{seed}"
    recs, launched = run_seed(task, seed, run_dir, common.split_extra(a.extra), a.threads)
    t, s = time_to_target(recs, target)
    hit = first_at_target(recs, target)
    # from the command to the record that first reached the target: start-up included
    from_command = hit["unix_time"] - launched if hit and "unix_time" in hit else None
    final = recs[-1].get("episode_return_mean") if recs else None
    common.console.print(
        f"{task} seed {seed}: time to {target:g} = "
        f"{'not reached' if t is None else f'{t:.2f} s ({from_command:.2f} s from the command)'}"
        f", final {final}"
    )
    return {
        "task": task,
        "seed": seed,
        "target": target,
        "time_to_target_s": t,
        "command_to_target_s": from_command,
        "steps_to_target": s,
        "final_return": final,
        "wall_time_s": recs[-1]["wall_time"],
    }


def summarize_task(a: SolveArgs, task: str, target: float, runs: list[dict]) -> dict:
    times = [r["time_to_target_s"] for r in runs]
    steps = [r["steps_to_target"] for r in runs]
    reached = [t for t in times if t is not None]
    return {
        "task": task,
        "target": target,
        "seeds": a.seeds,
        "reached": len(reached),
        # a seed that never reached the target counts as infinitely slow in the median
        "median_time_s": (
            statistics.median([t if t is not None else float("inf") for t in times])
            if times
            else None
        ),
        "median_command_to_target_s": (
            statistics.median(
                [
                    c if c is not None else float("inf")
                    for c in (r["command_to_target_s"] for r in runs)
                ]
            )
            if runs
            else None
        ),
        "min_time_s": min(reached) if reached else None,
        "max_time_s": max(reached) if reached else None,
        "median_steps": common.median([float(s) for s in steps if s is not None]),
        "median_final_return": common.median([r["final_return"] for r in runs]),
    }


def machine_columns(m: dict) -> dict:
    return {"cpu": m["cpu"], "cores": m["cores"], "torch": m["torch"]}
