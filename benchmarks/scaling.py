"""`distrl bench scaling`: synchronous DD-PPO throughput over world sizes (the scaling benchmark).

For each world size W and repeat, one training run under torchrun (W=1: a plain process),
``--threads 1`` per rank. From ``metrics.jsonl`` (rank 0) the first ``--warmup`` iterations are
dropped; over the rest

    FPS(W) = env steps / sum(time/iteration)          (env steps of all ranks together)
    S(W)   = FPS(W) / FPS(1)          E(W) = S(W) / W
    rho_comm = t_comm / t_iter        rho_sync = t_sync / t_iter

``weak`` keeps the envs per rank (global batch W*E*T grows with W); ``strong`` divides the envs
by W (global batch constant, the reference experiment's setting).

The hardware ceiling: the same per-rank work as W independent single processes started at once
(no process group, distinct seeds). Their summed FPS is what this machine can give W busy
processes at all (cores, memory bandwidth, turbo), so FPS(W) / ceiling(W) isolates what
distribution itself costs, apart from what the machine cannot give.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from benchmarks import common
from benchmarks.project import grad_buffer_bytes
from benchmarks.runs import per_rank_envs, quiet_train_args, run_independent, run_training

SUMMARY_COLUMNS = [
    "W",
    "rollout_steps",
    "num_envs_per_rank",
    "global_batch",
    "fps_mean",
    "fps_std",
    "speedup",
    "efficiency",
    "ceiling_fps",
    "efficiency_vs_ceiling",
    "t_iter",
    "t_rollout",
    "t_learn",
    "t_comm",
    "t_sync",
    "rho_comm",
    "rho_sync",
]


@dataclass(frozen=True)
class ScalingArgs:
    task: str = "cartpole"
    """Task to train (its tuned defaults, then the overrides below)."""
    world_sizes: str = "1,2,4"
    """World sizes W to measure, comma-separated."""
    mode: Literal["weak", "strong"] = "weak"
    """weak: --num-envs per rank at every W; strong: --num-envs divided by W (constant batch)."""
    repeats: int = 3
    """Fresh runs per world size; FPS mean and std are over these."""
    iterations: int = 30
    """Training iterations per run (warm-up included)."""
    warmup: int = 5
    """Leading iterations dropped before measuring (allocator, first-call overheads)."""
    num_envs: int | None = None
    """Envs per rank (weak) or in total (strong); default: the task's own."""
    num_steps: int | None = None
    """Rollout steps T per env per iteration; default: the task's own."""
    epochs: int | None = None
    """PPO epochs K per iteration; default: the task's own."""
    minibatches: int | None = None
    """Minibatches M per epoch; default: the task's own."""
    profile_sync: bool = False
    """Barrier before each gradient all-reduce so time/sync is measured (adds its own cost)."""
    ceiling: bool = True
    """Also run W independent processes at once for the hardware ceiling."""
    threads: int = 1
    """Intra-op threads per process."""
    timeout: float = 1800.0
    """Seconds one run may take before it is killed and reported as failed."""
    out: str | None = None
    """Results directory (default bench_out/scaling)."""
    extra: tuple[str, ...] = ()
    """Extra `train` overrides, e.g. --extra="--agent.learning-rate 3e-4" (split like a shell)."""


def _mean(xs: list[float | None]) -> float | None:
    known = [x for x in xs if x is not None]
    if not xs or len(known) < len(xs):
        return None
    return statistics.fmean(known)


def run_stats(records: list[dict], warmup: int) -> dict[str, Any]:
    """FPS and mean time breakdown over the iterations after the first ``warmup``."""
    if len(records) <= warmup:
        raise ValueError(
            f"{len(records)} iteration(s) logged but --warmup drops {warmup}; raise --iterations"
        )
    kept = records[warmup:]
    prev_steps = records[warmup - 1]["env_steps"] if warmup > 0 else 0
    steps = kept[-1]["env_steps"] - prev_steps
    seconds = sum(r["time/iteration"] for r in kept)

    def m(key: str) -> float | None:
        return _mean([r.get(key) for r in kept])

    t_iter = seconds / len(kept)
    parts = [m("time/rollout"), m("time/learn"), m("time/comm"), m("time/sync") or 0.0]
    known = [p for p in parts if p is not None]
    other = t_iter - sum(known) if len(known) == len(parts) else None
    # each rank's own breakdown (allreduce records it: rank/<r>/<part>), as rank<r>_<part>
    per_rank = sorted({k for r in kept for k in r if k.startswith("rank/")})
    ranks = {f"rank{k.split('/')[1]}_{k.split('/')[2]}": m(k) for k in per_rank}
    return {
        "fps": steps / seconds,
        "t_iter": t_iter,
        "t_rollout": m("time/rollout"),
        "t_rollout_max": m("time/rollout_max"),
        "t_learn": m("time/learn"),
        "t_comm": m("time/comm"),
        "t_sync": m("time/sync"),
        "t_other": other,
        "iterations_kept": len(kept),
        **ranks,
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


# ---- the command ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Plan:
    """What every run of one `bench scaling` invocation trains, checked before the first run."""

    worlds: list[int]
    envs: dict[int, int]
    """Envs per rank at each world size."""
    num_steps: int
    epochs: int
    minibatches: int
    grad_bytes: int
    ncores: int
    extra: list[str]


def scaling(a: ScalingArgs) -> list[dict]:
    m = common.header("distrl bench scaling")
    out = common.out_dir(a.out, "scaling")
    plan = make_plan(a)
    announce(a, plan)
    per_run = run_all(a, plan, out)
    summary = summarize(per_run, plan.worlds, plan.ncores)
    for row in summary:
        row |= run_facts(a, plan, m)
    write_results(a, plan, m, out, per_run, summary)
    print_results(a, summary, out)
    return summary


def check_args(a: ScalingArgs) -> None:
    if a.repeats < 1 or a.iterations < 1 or a.warmup < 0:
        raise ValueError("--repeats and --iterations must be >= 1 and --warmup >= 0")
    if a.iterations <= a.warmup:
        raise ValueError(f"--iterations {a.iterations} must exceed --warmup {a.warmup}")


def make_plan(a: ScalingArgs) -> Plan:
    """The task's defaults with the overrides; every world size's config validated up front."""
    from distrl.config import validate
    from distrl.envs.registry import get_task

    worlds = common.parse_ints(a.world_sizes)
    check_args(a)
    base = get_task(a.task).default_config()
    base = dataclasses.replace(base, task=get_task(a.task).name)
    agent = dataclasses.replace(
        base.agent,
        num_steps=a.num_steps or base.agent.num_steps,
        num_epochs=a.epochs or base.agent.num_epochs,
        num_minibatches=a.minibatches or base.agent.num_minibatches,
        max_iterations=a.iterations,
        save_interval=10**9,
    )
    envs_arg = a.num_envs or base.env.num_envs
    envs, configs = {}, {}
    for w in worlds:  # validate every configuration before the first run starts
        envs[w] = per_rank_envs(envs_arg, w, a.mode)
        env = dataclasses.replace(base.env, num_envs=envs[w])
        configs[w] = validate(dataclasses.replace(base, agent=agent, env=env))
    return Plan(
        worlds=worlds,
        envs=envs,
        num_steps=agent.num_steps,
        epochs=agent.num_epochs,
        minibatches=agent.num_minibatches,
        grad_bytes=grad_buffer_bytes(configs[worlds[0]]),
        ncores=common.cores(),
        extra=common.split_extra(a.extra),
    )


def announce(a: ScalingArgs, plan: Plan) -> None:
    common.console.print(
        f"task {a.task} | {a.mode} scaling | T={plan.num_steps} K={plan.epochs} "
        f"M={plan.minibatches} | envs "
        + ", ".join(f"W={w}: {plan.envs[w]}/rank" for w in plan.worlds)
        + f" | {a.iterations} iterations ({a.warmup} warm-up) x {a.repeats} repeats"
        + f" | gradient buffer {plan.grad_bytes:,} B"
    )
    over = [w for w in plan.worlds if w > plan.ncores]
    if over:
        common.console.print(
            f"[yellow]note: W={', '.join(map(str, over))} > {plan.ncores} cores: oversubscribed; "
            f"those ranks share cores, so their FPS measures the machine, not the method "
            f"(compare with the ceiling column)."
        )


def train_args(a: ScalingArgs, plan: Plan, envs: int, profile: bool) -> list[str]:
    """The `train` overrides of one run with ``envs`` envs per rank."""
    args = [
        "--env.num-envs",
        str(envs),
        "--agent.num-steps",
        str(plan.num_steps),
        "--agent.num-epochs",
        str(plan.epochs),
        "--agent.num-minibatches",
        str(plan.minibatches),
        "--agent.max-iterations",
        str(a.iterations),
        "--agent.save-interval",
        str(10**9),
        *quiet_train_args(a.threads),
    ]
    if profile:
        args += ["--dist.profile-sync", "True"]
    return args + plan.extra


def run_all(a: ScalingArgs, plan: Plan, out: Path) -> list[dict]:
    """Every repeat of every W (W interleaved, so that drift spreads over all of them), each
    followed by its ceiling run; one row per run."""
    jobs = [(r, w) for r in range(a.repeats) for w in plan.worlds]
    n_runs = len(jobs) + (sum(1 for _, w in jobs if w > 1) if a.ceiling else 0)
    per_run: list[dict] = []
    for r, w in jobs:
        row = {
            "W": w,
            "repeat": r,
            "rollout_steps": plan.num_steps,
            "num_envs_per_rank": plan.envs[w],
            "global_batch": w * plan.envs[w] * plan.num_steps,
        }
        per_run.append(distributed_run(a, plan, out, row, f"[{len(per_run) + 1}/{n_runs}]"))
        if a.ceiling and w > 1:
            per_run.append(ceiling_run(a, plan, out, row, f"[{len(per_run) + 1}/{n_runs}]"))
    return per_run


def distributed_run(a: ScalingArgs, plan: Plan, out: Path, row: dict, label: str) -> dict:
    """One training run of W ranks: its FPS and time breakdown."""
    w, r = row["W"], row["repeat"]
    t0 = time.perf_counter()
    recs = run_training(
        a.task,
        w,
        train_args(a, plan, plan.envs[w], a.profile_sync),
        out / "runs" / f"W{w}_r{r}",
        a.timeout,
        seed=1000 * r,
        iterations=a.iterations,
    )
    st = run_stats(recs, a.warmup)
    common.console.print(
        f"{label} W={w} repeat {r}: {st['fps']:,.0f} env-steps/s, t_iter "
        f"{st['t_iter'] * 1e3:.1f} ms (comm {(st['t_comm'] or 0) * 1e3:.1f} ms) "
        f"[{time.perf_counter() - t0:.0f} s]"
    )
    return {**row, "kind": "distributed", **st}


def ceiling_run(a: ScalingArgs, plan: Plan, out: Path, row: dict, label: str) -> dict:
    """W independent processes with the same per-rank work: their summed FPS."""
    w, r = row["W"], row["repeat"]
    t0 = time.perf_counter()
    runs = run_independent(
        a.task,
        w,
        train_args(a, plan, plan.envs[w], False),
        out / "runs" / f"W{w}_r{r}_ceiling",
        a.timeout,
        seed=1000 * r,
    )
    stats = [run_stats(x, a.warmup) for x in runs]
    fps = sum(s["fps"] for s in stats)
    common.console.print(
        f"{label} W={w} repeat {r}: ceiling ({w} independent processes) "
        f"{fps:,.0f} env-steps/s [{time.perf_counter() - t0:.0f} s]"
    )
    return {
        **row,
        "kind": "ceiling",
        "fps": fps,
        "fps_per_process": " ".join(f"{s['fps']:.0f}" for s in stats),
        "t_iter": statistics.fmean(s["t_iter"] for s in stats),
        "t_rollout": statistics.fmean(s["t_rollout"] for s in stats),
        "t_learn": statistics.fmean(s["t_learn"] for s in stats),
    }


def run_facts(a: ScalingArgs, plan: Plan, m: dict) -> dict:
    """Columns every summary row carries: the settings and the machine."""
    return {
        "task": a.task,
        "mode": a.mode,
        "epochs": plan.epochs,
        "minibatches": plan.minibatches,
        "grad_bytes": plan.grad_bytes,
        "iterations": a.iterations,
        "warmup": a.warmup,
        "repeats": a.repeats,
        "threads": a.threads,
        "profile_sync": a.profile_sync,
        "cpu": m["cpu"],
        "cores": plan.ncores,
        "device": m["device"],
        "torch": m["torch"],
    }


def write_results(
    a: ScalingArgs, plan: Plan, m: dict, out: Path, per_run: list[dict], summary: list[dict]
) -> None:
    from benchmarks import plots

    common.write_csv(out / "per_run.csv", per_run)
    common.write_csv(out / "summary.csv", summary)
    plots.scaling(
        summary,
        out / "plots.png",
        f"{a.task}, {a.mode} scaling, T={plan.num_steps}, K={plan.epochs}, M={plan.minibatches}"
        f" | {m['cpu']}, {plan.ncores} cores",
    )


def print_results(a: ScalingArgs, summary: list[dict], out: Path) -> None:
    common.show(
        f"scaling: {a.task}, {a.mode} (FPS over iterations after {a.warmup} warm-up)",
        summary,
        [
            ("W", "W"),
            ("envs/rank", "num_envs_per_rank"),
            ("batch", "global_batch"),
            ("FPS", "fps_mean"),
            ("±", "fps_std"),
            ("S(W)", "speedup"),
            ("E(W)", "efficiency"),
            ("ceiling", "ceiling_fps"),
            ("FPS/ceil", "efficiency_vs_ceiling"),
            ("note", "note"),
        ],
    )
    ms = 1e3
    common.show(
        "time per iteration (ms, mean over kept iterations and repeats)",
        summary,
        [
            ("W", "W"),
            ("t_iter", "t_iter", ms),
            ("rollout", "t_rollout", ms),
            ("learn", "t_learn", ms),
            ("comm", "t_comm", ms),
            ("sync", "t_sync", ms),
            ("other", "t_other", ms),
            ("ρ_comm", "rho_comm"),
            ("ρ_sync", "rho_sync"),
        ],
    )
    if not a.profile_sync and any(r["W"] > 1 for r in summary):
        common.console.print(
            "t_sync is not measured without --profile-sync (waiting for a slower rank then shows "
            "up inside t_comm)."
        )
    common.console.print(f"wrote {out / 'per_run.csv'}, {out / 'summary.csv'}, {out / 'plots.png'}")


def summarize(per_run: list[dict], worlds: list[int], ncores: int) -> list[dict]:
    """One row per W: FPS mean/std over repeats, S, E, the ceiling and the time fractions."""
    rows = []
    fps1 = None
    for w in worlds:
        runs = [r for r in per_run if r["W"] == w and r["kind"] == "distributed"]
        ceil = [r["fps"] for r in per_run if r["W"] == w and r["kind"] == "ceiling"]
        fps = [r["fps"] for r in runs]
        fps_mean = statistics.fmean(fps)
        if w == 1:
            fps1 = fps_mean
            ceil = fps  # one independent process is the W=1 run itself

        def mean_of(key: str, runs: list[dict] = runs) -> float | None:
            return _mean([r.get(key) for r in runs])

        t_iter = mean_of("t_iter")
        ceiling_fps = statistics.fmean(ceil) if ceil else None
        speedup = _ratio(fps_mean, fps1)
        rows.append(
            {
                "W": w,
                "rollout_steps": runs[0]["rollout_steps"],
                "num_envs_per_rank": runs[0]["num_envs_per_rank"],
                "global_batch": runs[0]["global_batch"],
                "fps_mean": fps_mean,
                "fps_std": statistics.stdev(fps) if len(fps) > 1 else 0.0,
                "speedup": speedup,
                "efficiency": None if speedup is None else speedup / w,
                "ceiling_fps": ceiling_fps,
                "efficiency_vs_ceiling": _ratio(fps_mean, ceiling_fps),
                "t_iter": t_iter,
                "t_rollout": mean_of("t_rollout"),
                "t_learn": mean_of("t_learn"),
                "t_comm": mean_of("t_comm"),
                "t_sync": mean_of("t_sync"),
                "rho_comm": _ratio(mean_of("t_comm"), t_iter),
                "rho_sync": _ratio(mean_of("t_sync"), t_iter),
                "t_other": mean_of("t_other"),
                "t_rollout_max": mean_of("t_rollout_max"),
                "oversubscribed": w > ncores,
                "note": f"oversubscribed ({w} > {ncores} cores)" if w > ncores else "",
            }
        )
    return rows
