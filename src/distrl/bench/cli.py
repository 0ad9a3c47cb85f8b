"""`distrl bench <what>`: each benchmark is one command with a results directory (--out),
a CSV, a printed table and a header naming the machine."""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass

import tyro

from distrl.bench import common

USAGE = """usage: distrl bench <what> [options]   (`distrl bench <what> --help` for options)

  throughput   env-steps/s: rollout only, and whole iterations (rsl_rl's CartPole setup)
  solve        training wall time to a target return, median over seeds
  scaling      FPS, speedup, efficiency and time breakdown over world sizes (torchrun)
  learn        time-to-target and learning curves per world size
  comm         all-reduce time vs message size, fitted latency/bandwidth; flat vs bucketed sync
  project      t_iter, speedup and efficiency projected to large world sizes
"""


@dataclass(frozen=True)
class ThroughputArgs:
    task: str = "cartpole"
    """Task to measure."""
    rollout_envs: int = 4096
    """Envs for the rollout-only case."""
    e2e_envs: int = 1024
    """Envs for the end-to-end case (rsl_rl's CartPole setting)."""
    num_steps: int = 32
    """Steps per env per iteration."""
    iterations: int = 10
    """Timed iterations per run (after one warm-up)."""
    repeats: int = 3
    """Fresh processes per case; the median is reported."""
    threads: int = 1
    """Intra-op threads."""
    out: str | None = None
    """Results directory (default bench_out/throughput)."""


def throughput(a: ThroughputArgs) -> list[dict]:
    m = common.header("distrl bench throughput")
    out = common.out_dir(a.out, "throughput")
    rows = []
    for case, envs in (("rollout", a.rollout_envs), ("e2e", a.e2e_envs), ("e2e", a.rollout_envs)):
        runs = [
            common.run_json(
                "distrl.bench.throughput",
                [
                    "--case",
                    case,
                    "--task",
                    a.task,
                    "--num-envs",
                    str(envs),
                    "--num-steps",
                    str(a.num_steps),
                    "--iterations",
                    str(a.iterations),
                    "--threads",
                    str(a.threads),
                ],
            )
            for _ in range(a.repeats)
        ]
        row = dict(runs[0])
        row["sps_median"] = statistics.median(r["sps_median"] for r in runs)
        row["sps_runs"] = " ".join(f"{r['sps_median']:.0f}" for r in runs)
        row["peak_rss_mb"] = max(r["peak_rss_mb"] for r in runs)
        row |= {"cpu": m["cpu"], "cores": m["cores"], "torch": m["torch"]}
        rows.append(row)
    common.write_csv(out / "throughput.csv", rows)
    common.print_table(
        "throughput (env-steps/s, median of fresh processes)",
        rows,
        [
            "case",
            "task",
            "num_envs",
            "num_steps",
            "threads",
            "sps_median",
            "sps_runs",
            "peak_rss_mb",
        ],
    )
    common.console.print(f"wrote {out / 'throughput.csv'}")
    return rows


@dataclass(frozen=True)
class SolveArgs:
    tasks: tuple[str, ...] = ("cartpole", "gym:CartPole-v1", "pendulum")
    """Tasks to train with their default configs."""
    seeds: int = 5
    """Seeds per task (one process each)."""
    target: tuple[float, ...] = ()
    """Target return per task (default: 475 for CartPole, -200 for pendulum)."""
    threads: int = 1
    """Intra-op threads."""
    out: str | None = None
    """Results directory (default bench_out/solve)."""
    extra: tuple[str, ...] = ()
    """Extra overrides passed to every `train` (e.g. --agent.max-iterations 300)."""


def solve(a: SolveArgs) -> list[dict]:
    from distrl.bench.scaling import split_extra
    from distrl.bench.solve import DEFAULT_TARGETS, run_seed, time_to_target

    m = common.header("distrl bench solve")
    out = common.out_dir(a.out, "solve")
    per_run, summary = [], []
    for i, task in enumerate(a.tasks):
        target = a.target[i] if i < len(a.target) else DEFAULT_TARGETS.get(task)
        if target is None:
            raise ValueError(f"no default target for {task}; pass --target")
        times, steps, finals = [], [], []
        for seed in range(a.seeds):
            run_dir = out / task.replace(":", "_") / f"seed{seed}"
            recs = run_seed(task, seed, run_dir, split_extra(a.extra), a.threads)
            t, s = time_to_target(recs, target)
            final = recs[-1].get("episode_return_mean") if recs else None
            per_run.append(
                {
                    "task": task,
                    "seed": seed,
                    "target": target,
                    "time_to_target_s": t,
                    "steps_to_target": s,
                    "final_return": final,
                    "wall_time_s": recs[-1]["wall_time"],
                }
            )
            common.console.print(
                f"{task} seed {seed}: time to {target:g} = "
                f"{'not reached' if t is None else f'{t:.2f} s'}, final {final}"
            )
            times.append(t)
            steps.append(s)
            finals.append(final)
        reached = [t for t in times if t is not None]
        summary.append(
            {
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
                "min_time_s": min(reached) if reached else None,
                "max_time_s": max(reached) if reached else None,
                "median_steps": common.median([float(s) for s in steps if s is not None]),
                "median_final_return": common.median(finals),
                "cpu": m["cpu"],
                "cores": m["cores"],
                "torch": m["torch"],
            }
        )
    common.write_csv(out / "per_run.csv", per_run)
    common.write_csv(out / "summary.csv", summary)
    common.print_table(
        "time to target (training wall time)",
        summary,
        [
            "task",
            "target",
            "reached",
            "median_time_s",
            "min_time_s",
            "max_time_s",
            "median_steps",
            "median_final_return",
        ],
    )
    return summary


COMMANDS = {"throughput": (ThroughputArgs, throughput), "solve": (SolveArgs, solve)}


def register(name: str, args_cls: type, fn) -> None:
    COMMANDS[name] = (args_cls, fn)


def bench_main(argv: list[str]) -> int:
    from distrl.bench import extra  # noqa: F401  (registers scaling/learn/comm/project)

    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"error: unknown benchmark {name!r}\n{USAGE}", file=sys.stderr)
        return 2
    args_cls, fn = COMMANDS[name]
    args = tyro.cli(args_cls, args=rest, prog=f"distrl bench {name}")
    try:
        fn(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0
