"""`distrl bench learn`: does W ranks learn as well as one, and how much sooner (seed 002's
time-to-target T_W, P0.4)?

Every (W, seed) trains to completion. From rank 0's ``metrics.jsonl``: the first wall time at
which ``episode_return_mean`` (last 100 episodes, all ranks) reaches the target, and the final
return. Reported per W: median time to target over seeds (a seed that never reaches it counts as
infinitely slow), min/max over the seeds that did, S_ttt(W) = T_1 / T_W, the median final
return, and curves of return vs env steps and vs wall-clock.

The default mode is ``strong`` (global batch fixed, envs divided among ranks): the same
optimization problem at every W, so a difference in learning is the system's, not the batch's.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from dataclasses import dataclass
from typing import Literal

import numpy as np

from distrl.bench import common


@dataclass(frozen=True)
class LearnArgs:
    task: str = "cartpole"
    """Task to train (its tuned defaults, then the overrides below)."""
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
    tolerance: float = 0.05
    """W>1 learns as well if its median final return is within this fraction of |target| of
    W=1's (or better), or it reaches the target in at least as many seeds."""
    threads: int = 1
    """Intra-op threads per process."""
    timeout: float = 3600.0
    """Seconds one run may take before it is killed and reported as failed."""
    out: str | None = None
    """Results directory (default bench_out/learn)."""
    extra: tuple[str, ...] = ()
    """Extra `train` overrides, e.g. --extra="--agent.learning-rate 3e-4" (split like a shell)."""


def time_to_target(records: list[dict], target: float) -> tuple[float | None, int | None]:
    """(wall_time, env_steps) of the first record whose return mean reaches ``target``."""
    from distrl.bench.solve import time_to_target as ttt

    return ttt(records, target)


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


def learn(a: LearnArgs) -> list[dict]:
    from distrl.bench import plots
    from distrl.bench.scaling import parse_ints, per_rank_envs, run_training, show, split_extra
    from distrl.bench.solve import DEFAULT_TARGETS
    from distrl.config import validate
    from distrl.envs.registry import get_task

    m = common.header("distrl bench learn")
    out = common.out_dir(a.out, "learn")
    worlds = parse_ints(a.world_sizes)
    task = get_task(a.task)
    target = a.target_return if a.target_return is not None else DEFAULT_TARGETS.get(task.name)
    if target is None:
        raise ValueError(f"no default target for {task.name}; pass --target-return")
    if a.seeds < 1:
        raise ValueError("--seeds must be at least 1")
    base = dataclasses.replace(task.default_config(), task=task.name)
    iters = a.iterations or base.agent.max_iterations
    envs_arg = a.num_envs or base.env.num_envs
    extra = split_extra(a.extra)
    envs = {}
    for w in worlds:
        envs[w] = per_rank_envs(envs_arg, w, a.mode)
        validate(dataclasses.replace(base, env=dataclasses.replace(base.env, num_envs=envs[w])))
    common.console.print(
        f"task {task.name} | target {target:g} | {a.mode} | {iters} iterations | envs "
        + ", ".join(f"W={w}: {envs[w]}/rank" for w in worlds)
        + f" | {a.seeds} seeds"
    )
    per_run, long_rows = [], []
    curves: dict[int, list[dict]] = {w: [] for w in worlds}
    n_runs, done = len(worlds) * a.seeds, 0
    for seed in range(a.seeds):
        for w in worlds:
            args = [
                "--env.num-envs",
                str(envs[w]),
                "--agent.max-iterations",
                str(iters),
                "--progress",
                "False",
                "--tensorboard",
                "False",
                "--threads",
                str(a.threads),
                *extra,
            ]
            t0 = time.perf_counter()
            recs = run_training(
                task.name,
                w,
                args,
                out / "runs" / f"W{w}_s{seed}",
                a.timeout,
                seed=seed,
                iterations=iters,
            )
            t, s = time_to_target(recs, target)
            final = recs[-1].get("episode_return_mean") if recs else None
            done += 1
            per_run.append(
                {
                    "W": w,
                    "seed": seed,
                    "num_envs_per_rank": envs[w],
                    "global_batch": recs[0]["env_steps"] // recs[0]["iteration"],
                    "target": target,
                    "time_to_target_s": t,
                    "steps_to_target": s,
                    "final_return": final,
                    "wall_time_s": recs[-1]["wall_time"],
                    "env_steps": recs[-1]["env_steps"],
                }
            )
            curves[w].append(curve(recs))
            long_rows += [
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
            common.console.print(
                f"[{done}/{n_runs}] W={w} seed {seed}: "
                + ("target not reached" if t is None else f"target at {t:.1f} s ({s:,} steps)")
                + f", final return {final if final is None else f'{final:.1f}'} "
                f"[{time.perf_counter() - t0:.0f} s]"
            )
    summary = []
    for w in worlds:
        runs = [r for r in per_run if r["W"] == w]
        row = {
            "W": w,
            "num_envs_per_rank": envs[w],
            "global_batch": runs[0]["global_batch"],
            "seeds": len(runs),
            "target": target,
            **summarize_times([r["time_to_target_s"] for r in runs]),
            "median_steps": common.median([r["steps_to_target"] for r in runs]),
            "median_final_return": common.median([r["final_return"] for r in runs]),
        }
        summary.append(row)
    base_row = next((r for r in summary if r["W"] == 1), None)
    for row in summary:
        t1 = base_row["median_time_s"] if base_row else None
        row["speedup_ttt"] = (t1 / row["median_time_s"]) if t1 and row["median_time_s"] else None
        row["learns_as_well"] = (
            learns_as_well(base_row, row, target, a.tolerance) if base_row else None
        )
        row |= {"cpu": m["cpu"], "cores": m["cores"], "mode": a.mode, "task": task.name}
    medians = {}
    for w, cs in curves.items():
        ms = median_curve([c["steps"] for c in cs], [c["ret"] for c in cs])
        mt = median_curve([c["time"] for c in cs], [c["ret"] for c in cs])
        if ms and mt:
            medians[w] = {"steps": ms[0], "ret_s": ms[1], "time": mt[0], "ret_t": mt[1]}
    common.write_csv(out / "per_run.csv", per_run)
    common.write_csv(out / "summary.csv", summary)
    common.write_csv(out / "curves.csv", long_rows)
    plots.learning(
        curves,
        medians,
        target,
        out / "curves.png",
        f"{task.name}, {a.mode}, median of {a.seeds} seeds | {m['cpu']}",
    )
    show(
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
    return summary
