"""`distrl bench scaling`: synchronous DD-PPO throughput over world sizes (seed 002's P3).

For each world size W and repeat, one training run under torchrun (W=1: a plain process),
``--threads 1`` per rank. From ``metrics.jsonl`` (rank 0) the first ``--warmup`` iterations are
dropped; over the rest

    FPS(W) = env steps / sum(time/iteration)          (env steps of all ranks together)
    S(W)   = FPS(W) / FPS(1)          E(W) = S(W) / W
    rho_comm = t_comm / t_iter        rho_sync = t_sync / t_iter

``weak`` keeps the envs per rank (global batch W*E*T grows with W); ``strong`` divides the envs
by W (global batch constant, seed 002's setting).

The hardware ceiling: the same per-rank work as W independent single processes started at once
(no process group, distinct seeds). Their summed FPS is what this machine can give W busy
processes at all (cores, memory bandwidth, turbo), so FPS(W) / ceiling(W) isolates what
distribution itself costs, apart from what the machine cannot give.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from distrl.bench import common

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


# ---- helpers shared with `bench learn` ------------------------------------------------------
def parse_ints(text: str) -> list[int]:
    """'1,2,4' or '1 2 4' -> [1, 2, 4] (positive, sorted, unique)."""
    vals = sorted({int(x) for x in text.replace(",", " ").split()})
    if not vals or vals[0] < 1:
        raise ValueError(f"world sizes must be positive integers, got {text!r}")
    return vals


def split_extra(extra: tuple[str, ...]) -> list[str]:
    return [tok for item in extra for tok in shlex.split(item)]


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def per_rank_envs(total_or_rank: int, world: int, mode: str) -> int:
    """Envs each rank runs: ``total_or_rank`` per rank (weak) or divided by W (strong)."""
    if mode == "weak":
        return total_or_rank
    if total_or_rank % world:
        raise ValueError(
            f"strong scaling divides --num-envs {total_or_rank} by W={world}, which does not "
            f"divide it; pick a multiple of every world size (e.g. "
            f"{total_or_rank - total_or_rank % world + world})"
        )
    return total_or_rank // world


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")


def _kill(procs: list[subprocess.Popen]) -> None:
    """Kill each run's whole process group (torchrun's agent and its ranks)."""
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def _wait(procs: list[subprocess.Popen], logs: list[Path], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    try:
        for p in procs:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _kill(procs)
        raise RuntimeError(f"{what} took longer than {timeout:g} s (see {logs[0]})") from None
    except BaseException:  # Ctrl-C: the runs are in their own sessions, so stop them here
        _kill(procs)
        raise
    bad = [(p, log) for p, log in zip(procs, logs, strict=True) if p.returncode != 0]
    if bad:
        p, log = bad[0]
        tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
        raise RuntimeError(f"{what} failed (exit {p.returncode}, log {log}):\n{tail}")


def _start(cmd: list[str], log) -> subprocess.Popen:
    # own session: a timeout or Ctrl-C kills the run's process group, ranks included
    return subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, env=_env(), start_new_session=True
    )


def _fresh(run_dir: Path) -> Path:
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    return run_dir


def run_training(
    task: str,
    world: int,
    train_args: list[str],
    run_dir: Path,
    timeout: float,
    seed: int = 0,
    iterations: int | None = None,
) -> list[dict]:
    """One training run of ``world`` ranks (torchrun for W>1); returns rank 0's metrics.
    With ``iterations``, a failed exit after that many logged iterations only warns."""
    from distrl.distributed import launch
    from distrl.telemetry import read_metrics

    _fresh(run_dir)
    args = ["train", task, *train_args, "--seed", str(seed), "--run-dir", str(run_dir)]
    if world == 1:
        cmd = [sys.executable, "-m", "distrl.cli", *args]
    else:
        cmd = launch.torchrun_command(world, 0, [*args, "--distributed", "True"])
    log = run_dir / "launch.log"
    with log.open("w") as f:
        p = _start(cmd, f)
        try:
            _wait([p], [log], timeout, f"W={world} run")
        except RuntimeError:
            # A rank that dies in process-group teardown after the last iteration was logged
            # leaves a complete measurement; keep it, say so, and fail on anything else.
            metrics = run_dir / "metrics.jsonl"
            recs = read_metrics(metrics) if metrics.exists() else []
            if iterations is None or not recs or recs[-1].get("iteration") != iterations:
                raise
            common.console.print(
                f"[yellow]warning: W={world} run exited {p.returncode} after logging all "
                f"{iterations} iterations (teardown); measurements kept, see {log}"
            )
            return recs
    return read_metrics(run_dir / "metrics.jsonl")


def run_independent(
    task: str, count: int, train_args: list[str], run_dir: Path, timeout: float, seed: int = 0
) -> list[list[dict]]:
    """``count`` single processes started together (seeds seed+i, like ranks); their metrics."""
    from distrl.telemetry import read_metrics

    _fresh(run_dir)
    procs, logs, dirs = [], [], []
    files = []
    try:
        for i in range(count):
            d = run_dir / f"p{i}"
            d.mkdir()
            cmd = [
                sys.executable,
                "-m",
                "distrl.cli",
                "train",
                task,
                *train_args,
                "--seed",
                str(seed + i),
                "--run-dir",
                str(d),
            ]
            log = d / "launch.log"
            f = log.open("w")
            files.append(f)
            procs.append(_start(cmd, f))
            logs.append(log)
            dirs.append(d)
        _wait(procs, logs, timeout, f"ceiling run of {count} processes")
    finally:
        for f in files:
            f.close()
    return [read_metrics(d / "metrics.jsonl") for d in dirs]


def show(title: str, rows: list[dict], cols: list[tuple]) -> None:
    """Print ``rows`` with short headers: cols are (header, key) or (header, key, scale)."""
    shown = []
    for r in rows:
        d = {}
        for c in cols:
            v = r.get(c[1])
            if isinstance(v, bool):
                v = "yes" if v else "no"
            elif len(c) > 2 and isinstance(v, int | float):
                v = v * c[2]
            d[c[0]] = v
        shown.append(d)
    common.print_table(title, shown, [c[0] for c in cols])


def _mean(xs: list[float | None]) -> float | None:
    if not xs or any(x is None for x in xs):
        return None
    return statistics.fmean(xs)


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
    other = t_iter - sum(parts) if None not in parts else None
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
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


# ---- the command ---------------------------------------------------------------------------
def scaling(a: ScalingArgs) -> list[dict]:
    from distrl.bench.project import grad_buffer_bytes
    from distrl.config import validate
    from distrl.envs.registry import get_task

    m = common.header("distrl bench scaling")
    out = common.out_dir(a.out, "scaling")
    worlds = parse_ints(a.world_sizes)
    if a.repeats < 1 or a.iterations < 1 or a.warmup < 0:
        raise ValueError("--repeats and --iterations must be >= 1 and --warmup >= 0")
    if a.iterations <= a.warmup:
        raise ValueError(f"--iterations {a.iterations} must exceed --warmup {a.warmup}")
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
    extra = split_extra(a.extra)
    plan = {}
    for w in worlds:  # validate every configuration before the first run starts
        e = per_rank_envs(envs_arg, w, a.mode)
        cfg = validate(
            dataclasses.replace(base, agent=agent, env=dataclasses.replace(base.env, num_envs=e))
        )
        plan[w] = (e, cfg)
    T, K, M = agent.num_steps, agent.num_epochs, agent.num_minibatches
    grad_bytes = grad_buffer_bytes(plan[worlds[0]][1])
    ncores = cores()
    common.console.print(
        f"task {a.task} | {a.mode} scaling | T={T} K={K} M={M} | envs "
        + ", ".join(f"W={w}: {plan[w][0]}/rank" for w in worlds)
        + f" | {a.iterations} iterations ({a.warmup} warm-up) x {a.repeats} repeats"
        + f" | gradient buffer {grad_bytes:,} B"
    )
    over = [w for w in worlds if w > ncores]
    if over:
        common.console.print(
            f"[yellow]note: W={', '.join(map(str, over))} > {ncores} cores: oversubscribed; "
            f"those ranks share cores, so their FPS measures the machine, not the method "
            f"(compare with the ceiling column)."
        )

    def train_args(e: int, profile: bool) -> list[str]:
        args = [
            "--env.num-envs",
            str(e),
            "--agent.num-steps",
            str(T),
            "--agent.num-epochs",
            str(K),
            "--agent.num-minibatches",
            str(M),
            "--agent.max-iterations",
            str(a.iterations),
            "--agent.save-interval",
            str(10**9),
            "--progress",
            "False",
            "--tensorboard",
            "False",
            "--threads",
            str(a.threads),
        ]
        if profile:
            args += ["--dist.profile-sync", "True"]
        return args + extra

    per_run: list[dict] = []
    jobs = [(r, w) for r in range(a.repeats) for w in worlds]  # interleave W: drift spreads
    n_runs = len(jobs) + (sum(1 for _, w in jobs if w > 1) if a.ceiling else 0)
    done = 0
    for r, w in jobs:
        e, _ = plan[w]
        common_row = {
            "W": w,
            "repeat": r,
            "rollout_steps": T,
            "num_envs_per_rank": e,
            "global_batch": w * e * T,
        }
        t0 = time.perf_counter()
        recs = run_training(
            a.task,
            w,
            train_args(e, a.profile_sync),
            out / "runs" / f"W{w}_r{r}",
            a.timeout,
            seed=1000 * r,
            iterations=a.iterations,
        )
        st = run_stats(recs, a.warmup)
        done += 1
        per_run.append({**common_row, "kind": "distributed", **st})
        common.console.print(
            f"[{done}/{n_runs}] W={w} repeat {r}: {st['fps']:,.0f} env-steps/s, t_iter "
            f"{st['t_iter'] * 1e3:.1f} ms (comm {(st['t_comm'] or 0) * 1e3:.1f} ms) "
            f"[{time.perf_counter() - t0:.0f} s]"
        )
        if a.ceiling and w > 1:
            t0 = time.perf_counter()
            runs = run_independent(
                a.task,
                w,
                train_args(e, False),
                out / "runs" / f"W{w}_r{r}_ceiling",
                a.timeout,
                seed=1000 * r,
            )
            stats = [run_stats(x, a.warmup) for x in runs]
            fps = sum(s["fps"] for s in stats)
            done += 1
            per_run.append(
                {
                    **common_row,
                    "kind": "ceiling",
                    "fps": fps,
                    "fps_per_process": " ".join(f"{s['fps']:.0f}" for s in stats),
                    "t_iter": statistics.fmean(s["t_iter"] for s in stats),
                    "t_rollout": statistics.fmean(s["t_rollout"] for s in stats),
                    "t_learn": statistics.fmean(s["t_learn"] for s in stats),
                }
            )
            common.console.print(
                f"[{done}/{n_runs}] W={w} repeat {r}: ceiling ({w} independent processes) "
                f"{fps:,.0f} env-steps/s [{time.perf_counter() - t0:.0f} s]"
            )
    summary = summarize(per_run, worlds, ncores)
    for row in summary:
        row |= {
            "task": a.task,
            "mode": a.mode,
            "epochs": K,
            "minibatches": M,
            "grad_bytes": grad_bytes,
            "iterations": a.iterations,
            "warmup": a.warmup,
            "repeats": a.repeats,
            "threads": a.threads,
            "profile_sync": a.profile_sync,
            "cpu": m["cpu"],
            "cores": ncores,
            "device": m["device"],
            "torch": m["torch"],
        }
    common.write_csv(out / "per_run.csv", per_run)
    common.write_csv(out / "summary.csv", summary)
    from distrl.bench import plots

    plots.scaling(
        summary,
        out / "plots.png",
        f"{a.task}, {a.mode} scaling, T={T}, K={K}, M={M} | {m['cpu']}, {ncores} cores",
    )
    show(
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
    show(
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
    if not a.profile_sync and any(w > 1 for w in worlds):
        common.console.print(
            "t_sync is not measured without --profile-sync (waiting for a slower rank then shows "
            "up inside t_comm)."
        )
    common.console.print(f"wrote {out / 'per_run.csv'}, {out / 'summary.csv'}, {out / 'plots.png'}")
    return summary


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
