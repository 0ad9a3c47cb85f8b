"""`distrl bench straggler`: allreduce against the parameter-server modes (BSP/ASP/BAP, after
MALib), without and with one worker slowed down: the straggler runs train ``slow-<task>`` of
tests/fixtures/slow.py (`train --import tests.fixtures.slow`, a checkout has both packages), whose
env steps take ``--slowdown`` times as long on the rank ``DISTRL_SLOW_RANKS`` names.

Every mode runs with the same number of *workers* (ranks that collect): allreduce with W ranks,
the ps-* modes with W workers plus the server rank. Per (mode, straggler, seed) the task trains
to completion; reported per (mode, straggler): env-steps/s over the whole run (median over
seeds), time to the target return (median; a seed that never reaches it counts as infinitely
slow) and how many seeds reached it, the median final return, the largest staleness and a
histogram of each iteration's mean staleness, and the gradients dropped.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from benchmarks import common, plots
from benchmarks.runs import quiet_train_args, run_training
from benchmarks.solve import DEFAULT_TARGETS, time_to_target
from distrl.config import DistConfig


@dataclass(frozen=True)
class StragglerArgs:
    task: str = "cartpole"
    """Task to train (its tuned defaults)."""
    workers: int = 2
    """Ranks that collect experience (the ps-* modes add a server rank)."""
    modes: str = "allreduce,ps-bsp,ps-asp,ps-bap:1,ps-bap:2,ps-bap:4"
    """Modes, comma-separated; ps-bap:S sets --dist.ps.staleness S; la is learner-actor
    (on-policy, one learner + the workers as actors), la-async:K its async mode with
    --dist.max-policy-lag K (V-trace), la-async-gae:K the same without the correction;
    allreduce:F with DD-PPO's preemption threshold --dist.preempt-fraction F."""
    straggler: bool = True
    """Also run every mode with one slowed worker (False: even workers only)."""
    slowdown: float = 2.0
    """The straggler's env steps take this many times as long (one worker)."""
    seeds: int = 3
    """Seeds per (mode, straggler)."""
    target_return: float | None = None
    """Return to reach (default: 475 for CartPole)."""
    lifetime: float = 5.0
    """--dist.ps.lifetime for ps-bap (seconds)."""
    threads: int = 1
    """Intra-op threads per process."""
    timeout: float = 1800.0
    """Seconds one run may take before it is killed and reported as failed."""
    out: str | None = None
    """Results directory (default bench_out/straggler)."""
    extra: tuple[str, ...] = ()
    """Extra `train` overrides, e.g. --extra="--agent.max-iterations 60"."""


def mode_args(mode: str, a: StragglerArgs) -> tuple[str, list[str], int, int]:
    """(label, train flags, world size, the straggler's rank) of one mode."""
    name, _, s = mode.partition(":")
    if name in ("la", "la-async", "la-async-gae"):  # rank 0 learns; the workers act
        flags = ["--dist.strategy", "learner-actor"]
        if name != "la":
            lag = s or str(DistConfig().max_policy_lag)
            flags += ["--dist.sync", "async", "--dist.max-policy-lag", lag]
            flags += ["--dist.correction", "none" if name == "la-async-gae" else "vtrace"]
        return mode, flags, a.workers + 1, a.workers
    if name == "allreduce":
        preempt = ["--dist.preempt-fraction", s] if s else []
        return mode, ["--dist.strategy", "allreduce", *preempt], a.workers, a.workers - 1
    if name not in ("ps-bsp", "ps-asp", "ps-bap"):
        raise ValueError(
            f"unknown mode {mode!r}: allreduce, allreduce:F, ps-bsp, ps-asp, ps-bap:S, la, "
            f"la-async:K or la-async-gae:K"
        )
    flags = ["--dist.strategy", name]
    if name == "ps-bap":
        flags += ["--dist.ps.staleness", s or "2", "--dist.ps.lifetime", str(a.lifetime)]
    return mode, flags, a.workers + 1, a.workers  # rank 0 serves; the last worker straggles


def straggler_env(task: str, rank: int, slowdown: float) -> dict[str, str]:
    """What a straggler run's processes get: tests.fixtures.slow's task and its slow rank."""
    return {"DISTRL_SLOW_TASK": task, "DISTRL_SLOW_RANKS": f"{rank}:{slowdown}"}


def straggler(a: StragglerArgs) -> list[dict]:
    shape = f"{a.slowdown:g}x straggler" if a.straggler else "no straggler"
    m = common.header(f"bench straggler: {a.task}, {a.workers} workers, {shape}")
    target = a.target_return if a.target_return is not None else DEFAULT_TARGETS.get(a.task)
    if target is None:
        raise ValueError(f"no default target return for {a.task!r}; pass --target-return")
    out = common.out_dir(a.out, "straggler")
    per_run = []
    modes = [mode_args(mode.strip(), a) for mode in a.modes.split(",")]
    for seed in range(a.seeds):  # the modes alternate: a slow spell of the machine hits each
        for label, flags, world, slow_rank in modes:
            for slow in (False, True) if a.straggler else (False,):
                extra = [*flags, *quiet_train_args(a.threads), *common.split_extra(a.extra)]
                task, env = a.task, None
                if slow:
                    task, env = f"slow-{a.task}", straggler_env(a.task, slow_rank, a.slowdown)
                    extra += ["--import", "tests.fixtures.slow"]
                name = f"{label.replace(':', '_S')}_{'slow' if slow else 'even'}_s{seed}"
                run_dir = out / "runs" / name
                recs = run_training(task, world, extra, run_dir, a.timeout, seed=seed, env=env)
                row = run_row(label, slow, seed, recs, target)
                per_run.append(row)
                t = row["time_to_target_s"]
                common.console.print(
                    f"{label} {'straggler' if slow else 'even'} seed {seed}: "
                    f"{row['sps']:,.0f} env-steps/s, target "
                    + ("not reached" if t is None else f"at {t:.1f} s")
                    + f", final return {row['final_return']}"
                )
    summary = summarize(per_run)
    common.write_csv(out / "runs.csv", per_run)
    common.write_csv(out / "summary.csv", summary)
    plots.straggler(summary, out / "straggler.png", f"{a.task}: {a.workers} workers, {m['cpu']}")
    common.show(
        f"bench straggler ({a.workers} workers, {a.slowdown:g}x straggler, target {target:g}, "
        f"median of {a.seeds} seeds)",
        summary,
        [
            ("mode", "mode"),
            ("straggler", "straggler"),
            ("env-steps/s", "sps"),
            ("vs BSP", "sps_vs_bsp"),
            ("iteration s", "iteration_s"),
            ("t_target s", "time_to_target_s"),
            ("reached", "reached"),
            ("final return", "final_return"),
            ("staleness max", "staleness_max"),
            ("dropped", "dropped"),
            ("preempted steps", "preempted"),
        ],
    )
    common.console.print(f"results: {out}")
    return summary


def run_row(label: str, slow: bool, seed: int, recs: list[dict], target: float) -> dict:
    t, steps = time_to_target(recs, target)
    last = recs[-1]
    return {
        "mode": label,
        "straggler": slow,
        "seed": seed,
        "sps": last["env_steps"] / last["wall_time"],
        "time_to_target_s": t,
        "steps_to_target": steps,
        "final_return": last.get("episode_return_mean"),
        # learner-actor's policy lag is its staleness (weight versions behind)
        "staleness_max": max(
            (r.get("dist/staleness_max") or r.get("dist/policy_lag_max") or 0) for r in recs
        ),
        "staleness_means": [
            round(r.get("dist/staleness_mean") or r.get("dist/policy_lag_mean") or 0.0, 2)
            for r in recs
        ],
        "dropped": sum(r.get("dist/dropped") or r.get("dist/dropped_samples") or 0 for r in recs),
        "iterations": last["iteration"],
        "iteration_s": statistics.median(r["time/iteration"] for r in recs),
        "preempted": sum(r.get("dist/preempted_steps") or 0 for r in recs),
    }


def summarize(per_run: list[dict]) -> list[dict]:
    groups: dict[tuple[str, bool], list[dict]] = {}
    for r in per_run:
        groups.setdefault((r["mode"], r["straggler"]), []).append(r)
    summary = []
    for (mode, slow), rows in groups.items():
        times = [r["time_to_target_s"] for r in rows]
        reached = [t for t in times if t is not None]
        med_t = statistics.median([math.inf if t is None else t for t in times])
        hist: dict[float, int] = {}
        for r in rows:
            for s in r["staleness_means"]:
                hist[round(s)] = hist.get(round(s), 0) + 1
        summary.append(
            {
                "mode": mode,
                "straggler": slow,
                "sps": common.median([r["sps"] for r in rows]),
                "time_to_target_s": None if math.isinf(med_t) else med_t,
                "reached": f"{len(reached)}/{len(rows)}",
                "final_return": common.median([r["final_return"] for r in rows]),
                "staleness_max": max(r["staleness_max"] for r in rows),
                "staleness_hist": dict(sorted(hist.items())),
                "dropped": sum(r["dropped"] for r in rows),
                "iteration_s": common.median([r["iteration_s"] for r in rows]),
                "preempted": sum(r["preempted"] for r in rows),
            }
        )
    bsp = {s["straggler"]: s["sps"] for s in summary if s["mode"] == "ps-bsp"}
    for s in summary:
        base = bsp.get(s["straggler"])
        s["sps_vs_bsp"] = s["sps"] / base if base else None
    return summary
