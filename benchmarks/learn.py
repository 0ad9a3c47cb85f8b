"""`distrl bench learn`: does W ranks learn as well as one, and how much sooner (the scaling
benchmark's time-to-target T_W)?

Every (W, seed) trains to completion. From rank 0's ``metrics.jsonl``: the first wall time at
which ``episode_return_mean`` (last 100 episodes, all ranks) reaches the target, and the final
return. Reported per W: median time to target over seeds (a seed that never reaches it counts as
infinitely slow), min/max over the seeds that did, S_ttt(W) = T_1 / T_W, the median final
return, with ``--marks`` the median return at those env steps (``solve.return_at``), and curves
of return vs env steps and vs wall-clock.

The default mode is ``strong`` (global batch fixed, envs divided among ranks): the same
optimization problem at every W, so a difference in learning is the system's, not the batch's.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from benchmarks import common
from benchmarks.runs import per_rank_envs, quiet_train_args, run_training
from benchmarks.solve import DEFAULT_TARGETS, return_at, time_to_target


@dataclass(frozen=True)
class LearnArgs:
    task: str = "cartpole"
    """Task to train (its tuned defaults, then the overrides below)."""
    algorithm: str = "ppo"
    """--algorithm of every run (e.g. pqn): its defaults for the task (envs, rollout length,
    iterations) are what the overrides below change, as for `distrl train`."""
    world_sizes: str = "1,2"
    """World sizes W to compare, comma-separated."""
    seeds: int = 3
    """Seeds per world size (base seeds 0..S-1; each rank adds its rank)."""
    target_return: float | None = None
    """Return to reach (default: 475 for CartPole, -200 for pendulum, -100 for acrobot)."""
    mode: Literal["weak", "strong"] = "strong"
    """strong: --num-envs divided among the W ranks (fixed global batch); weak: per rank."""
    num_envs: int | None = None
    """Envs in total (strong) or per rank (weak); default: the task's own."""
    iterations: int | None = None
    """Training iterations per run; default: the task's own."""
    marks: tuple[int, ...] = ()
    """Env-step marks, e.g. --marks 5000000 10000000: each run's return at each (the mean of its
    iteration records in the last 2 % of steps before the mark) and the median over seeds."""
    tolerance: float = 0.05
    """W>1 learns as well if its median final return is within this fraction of |target| of
    W=1's (or better), or it reaches the target in at least as many seeds."""
    threads: int = 1
    """Intra-op threads per process; 0: distrl's default (cores / local world size), what a
    plain `distrl train` gets."""
    timeout: float = 3600.0
    """Seconds one run may take before it is killed and reported as failed."""
    out: str | None = None
    """Results directory (default bench_out/learn)."""
    extra: tuple[str, ...] = ()
    """Extra `train` overrides, e.g. --extra="--agent.learning-rate 3e-4" (split like a shell)."""


def summarize_times(times: list[float | None]) -> dict:
    """Median over seeds (unreached = inf), min/max over the seeds that reached the target."""
    reached = [t for t in times if t is not None]
    med = statistics.median([math.inf if t is None else t for t in times]) if times else None
    return {
        "reached": len(reached),
        "median_time_s": None if med is None or math.isinf(med) else med,
        "min_time_s": min(reached) if reached else None,
        "max_time_s": max(reached) if reached else None,
    }


def curve(records: list[dict]) -> dict[str, list[float]]:
    pts = [r for r in records if r.get("episode_return_mean") is not None]
    return {
        "steps": [float(r["env_steps"]) for r in pts],
        "time": [float(r["wall_time"]) for r in pts],
        "ret": [float(r["episode_return_mean"]) for r in pts],
    }


def median_curve(xs: list[list[float]], ys: list[list[float]], n: int = 200):
    """Median over seeds of curves sampled on a common grid from the latest first point to the
    latest last point; a seed that finished earlier holds its final return (its final policy).
    (grid, median) or None without data."""
    pairs = [(x, y) for x, y in zip(xs, ys, strict=True) if len(x) >= 1]
    if not pairs:
        return None
    lo = max(x[0] for x, _ in pairs)
    hi = max(x[-1] for x, _ in pairs)
    grid = np.linspace(lo, hi, n) if hi > lo else np.array([lo])
    vals = np.stack([np.interp(grid, x, y) for x, y in pairs])
    return grid.tolist(), np.median(vals, axis=0).tolist()


def learns_as_well(base: dict, row: dict, target: float, tolerance: float) -> bool | None:
    """The verdict rule printed with the table (see LearnArgs.tolerance)."""
    if base.get("median_final_return") is None or row.get("median_final_return") is None:
        return None
    close = row["median_final_return"] >= base["median_final_return"] - tolerance * abs(target)
    return bool(close or row["reached"] >= base["reached"])


@dataclass(frozen=True)
class Plan:
    """What every run of one `bench learn` invocation trains, checked before the first run."""

    task: str
    worlds: list[int]
    target: float
    iterations: int
    envs: dict[int, int]
    """Envs per rank at each world size."""
    extra: list[str]
    marks: tuple[int, ...] = ()


def learn(a: LearnArgs) -> list[dict]:
    m = common.header("distrl bench learn")
    out = common.out_dir(a.out, "learn")
    plan = make_plan(a)
    announce(a, plan)
    per_run, long_rows, curves = run_all(a, plan, out)
    summary = summarize(a, plan, per_run)
    for row in summary:
        row |= {"cpu": m["cpu"], "cores": m["cores"], "mode": a.mode, "task": plan.task}
    write_results(a, plan, m, out, per_run, summary, long_rows, curves)
    print_results(a, plan, summary, out)
    return summary


def make_plan(a: LearnArgs) -> Plan:
    """The task's defaults with the overrides; every world size's config validated up front."""
    from distrl.config import validate
    from distrl.envs.registry import get_task

    worlds = common.parse_ints(a.world_sizes)
    task = get_task(a.task)
    target = a.target_return if a.target_return is not None else DEFAULT_TARGETS.get(task.name)
    if target is None:
        raise ValueError(f"no default target for {task.name}; pass --target-return")
    if a.seeds < 1:
        raise ValueError("--seeds must be at least 1")
    base = dataclasses.replace(task.default_config(), task=task.name)
    algorithm = [] if a.algorithm == "ppo" else ["--algorithm", a.algorithm]
    if algorithm:
        from distrl.args import parse_train_args

        base = parse_train_args([task.name, *algorithm])
    envs_arg = a.num_envs or base.env.num_envs
    envs = {}
    for w in worlds:
        envs[w] = per_rank_envs(envs_arg, w, a.mode)
        validate(dataclasses.replace(base, env=dataclasses.replace(base.env, num_envs=envs[w])))
    iterations = a.iterations or base.agent.max_iterations
    extra = [*algorithm, *common.split_extra(a.extra)]
    steps = flag_value(extra, "--agent.num-steps", base.agent.num_steps)
    check_marks(a.marks, {w: iterations * w * envs[w] * steps for w in worlds})
    return Plan(
        task=task.name,
        worlds=worlds,
        target=target,
        iterations=iterations,
        envs=envs,
        extra=extra,
        marks=tuple(a.marks),
    )


def flag_value(args: list[str], flag: str, default: int) -> int:
    """The last value ``args`` give ``flag`` (``--flag N`` or ``--flag=N``), else ``default``."""
    value = default
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = int(args[i + 1])
        elif arg.startswith(flag + "="):
            value = int(arg.split("=", 1)[1])
    return value


def check_marks(marks: tuple[int, ...], budgets: dict[int, int]) -> None:
    """Every mark within every world size's budget of env steps, or a ValueError naming both."""
    for m in marks:
        if m <= 0:
            raise ValueError(f"--marks must be positive env-step counts; got {m}")
        short = {w: b for w, b in budgets.items() if b < m}
        if short:
            raise ValueError(
                f"mark {m:,} lies beyond the env steps of "
                + ", ".join(f"W={w} ({b:,})" for w, b in short.items())
                + ": raise --iterations or lower the mark"
            )


def announce(a: LearnArgs, plan: Plan) -> None:
    common.console.print(
        f"task {plan.task} | target {plan.target:g} | {a.mode} | {plan.iterations} iterations "
        "| envs "
        + ", ".join(f"W={w}: {plan.envs[w]}/rank" for w in plan.worlds)
        + f" | {a.seeds} seeds"
    )


def run_all(
    a: LearnArgs, plan: Plan, out: Path
) -> tuple[list[dict], list[dict], dict[int, list[dict]]]:
    """Every (seed, W) run: one row each, every logged iteration (long rows) and the curves."""
    per_run: list[dict] = []
    long_rows: list[dict] = []
    curves: dict[int, list[dict]] = {w: [] for w in plan.worlds}
    n_runs = len(plan.worlds) * a.seeds
    for seed in range(a.seeds):
        for w in plan.worlds:
            recs, row = train_one(a, plan, out, w, seed, f"[{len(per_run) + 1}/{n_runs}]")
            per_run.append(row)
            curves[w].append(curve(recs))
            long_rows += iteration_rows(w, seed, recs)
    return per_run, long_rows, curves


def train_one(
    a: LearnArgs, plan: Plan, out: Path, w: int, seed: int, label: str
) -> tuple[list[dict], dict]:
    """One run of W ranks to completion, and when it reached the target: (metrics, row)."""
    args = [
        "--env.num-envs",
        str(plan.envs[w]),
        "--agent.max-iterations",
        str(plan.iterations),
        *quiet_train_args(a.threads),
        *plan.extra,
    ]
    t0 = time.perf_counter()
    recs = run_training(
        plan.task,
        w,
        args,
        out / "runs" / f"W{w}_s{seed}",
        a.timeout,
        seed=seed,
        iterations=plan.iterations,
    )
    row = run_row(plan, w, seed, recs)
    t, s, final = row["time_to_target_s"], row["steps_to_target"], row["final_return"]
    common.console.print(
        f"{label} W={w} seed {seed}: "
        + ("target not reached" if t is None else f"target at {t:.1f} s ({s:,} steps)")
        + f", final return {final if final is None else f'{final:.1f}'} "
        f"[{time.perf_counter() - t0:.0f} s]"
    )
    return recs, row


def run_row(plan: Plan, w: int, seed: int, recs: list[dict]) -> dict:
    t, s = time_to_target(recs, plan.target)
    return {
        "W": w,
        "seed": seed,
        "num_envs_per_rank": plan.envs[w],
        "global_batch": recs[0]["env_steps"] // recs[0]["iteration"],
        "target": plan.target,
        "time_to_target_s": t,
        "steps_to_target": s,
        "final_return": recs[-1].get("episode_return_mean") if recs else None,
        "wall_time_s": recs[-1]["wall_time"],
        "env_steps": recs[-1]["env_steps"],
        **{mark_column(m): return_at(recs, m) for m in plan.marks},
    }


def mark_column(mark: int) -> str:
    return f"return_at_{mark:g}"


def iteration_rows(w: int, seed: int, recs: list[dict]) -> list[dict]:
    return [
        {
            "W": w,
            "seed": seed,
            "iteration": r["iteration"],
            "env_steps": r["env_steps"],
            "wall_time": r["wall_time"],
            "episode_return_mean": r.get("episode_return_mean"),
        }
        for r in recs
    ]


def summarize(a: LearnArgs, plan: Plan, per_run: list[dict]) -> list[dict]:
    """One row per W: times to target over seeds, T_1/T_W and the verdict against W=1."""
    summary = []
    for w in plan.worlds:
        runs = [r for r in per_run if r["W"] == w]
        summary.append(
            {
                "W": w,
                "num_envs_per_rank": plan.envs[w],
                "global_batch": runs[0]["global_batch"],
                "seeds": len(runs),
                "target": plan.target,
                **summarize_times([r["time_to_target_s"] for r in runs]),
                "median_steps": common.median([r["steps_to_target"] for r in runs]),
                "median_final_return": common.median([r["final_return"] for r in runs]),
                **{
                    f"median_{mark_column(m)}": common.median([r[mark_column(m)] for r in runs])
                    for m in plan.marks
                },
            }
        )
    base_row = next((r for r in summary if r["W"] == 1), None)
    for row in summary:
        t1 = base_row["median_time_s"] if base_row else None
        row["speedup_ttt"] = (t1 / row["median_time_s"]) if t1 and row["median_time_s"] else None
        row["learns_as_well"] = (
            learns_as_well(base_row, row, plan.target, a.tolerance) if base_row else None
        )
    return summary


def median_curves(curves: dict[int, list[dict]]) -> dict[int, dict]:
    """Per W: the median over seeds of return vs env steps and vs wall time."""
    medians = {}
    for w, cs in curves.items():
        ms = median_curve([c["steps"] for c in cs], [c["ret"] for c in cs])
        mt = median_curve([c["time"] for c in cs], [c["ret"] for c in cs])
        if ms and mt:
            medians[w] = {"steps": ms[0], "ret_s": ms[1], "time": mt[0], "ret_t": mt[1]}
    return medians


def write_results(
    a: LearnArgs,
    plan: Plan,
    m: dict,
    out: Path,
    per_run: list[dict],
    summary: list[dict],
    long_rows: list[dict],
    curves: dict[int, list[dict]],
) -> None:
    from benchmarks import plots

    common.write_csv(out / "per_run.csv", per_run)
    common.write_csv(out / "summary.csv", summary)
    common.write_csv(out / "curves.csv", long_rows)
    plots.learning(
        curves,
        median_curves(curves),
        plan.target,
        out / "curves.png",
        f"{plan.task}, {a.mode}, median of {a.seeds} seeds | {m['cpu']}",
    )


def print_results(a: LearnArgs, plan: Plan, summary: list[dict], out: Path) -> None:
    target = plan.target
    common.show(
        f"time to target {target:g} (training wall time, s)",
        summary,
        [
            ("W", "W"),
            ("batch", "global_batch"),
            ("reached", "reached"),
            ("median", "median_time_s"),
            ("min", "min_time_s"),
            ("max", "max_time_s"),
            ("T_1/T_W", "speedup_ttt"),
            ("steps", "median_steps"),
            ("final return", "median_final_return"),
            *((f"at {m:,}", f"median_{mark_column(m)}") for m in plan.marks),
            ("as well?", "learns_as_well"),
        ],
    )
    common.console.print(
        f"rule: W>1 learns as well as W=1 if its median final return is at least W=1's minus "
        f"{a.tolerance:g} x |target| = {a.tolerance * abs(target):g}, or it reaches the target "
        f"in as many seeds"
    )
    for row in summary:
        if row["W"] != 1 and row["learns_as_well"] is not None:
            verdict = "learns as well as" if row["learns_as_well"] else "learns WORSE than"
            common.console.print(f"W={row['W']}: {verdict} W=1")
    common.console.print(
        f"wrote {out / 'per_run.csv'}, {out / 'summary.csv'}, "
        f"{out / 'curves.csv'}, {out / 'curves.png'}"
    )
