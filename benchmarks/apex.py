"""`distrl bench apex`: Ape-X (1 learner + A actors, ``--dist.strategy learner-actor``) against
data-parallel off-policy learning on A ranks (``allreduce``), at equal env steps, the two
alternating seed by seed in the same sitting.

Both arms train the same task with the same algorithm flags (by default DQN with Ape-X's n-step
3 and prioritized replay), the same batch and replay per collecting process (an Ape-X learner
keeps and samples per actor), and evaluate the greedy policy every ``--eval-interval``
iterations. Reported per arm: wall time, the best and the last evaluation, the wall time and
env steps at which the evaluation first reached ``--target``, and each evaluation against wall
time (``apex.csv``, ``apex.png``).
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import common
from benchmarks.runs import PYTHON_CLI
from distrl.telemetry import read_metrics


@dataclass(frozen=True)
class ApexArgs:
    task: str = "cartpole"
    algorithm: str = "dqn"
    actors: int = 2
    """Actors of the one learner, and ranks of the allreduce arm."""
    steps: int = 60_000
    """Env steps of each run (--agent.total-timesteps)."""
    seeds: int = 3
    eval_interval: int = 10
    """Iterations between greedy evaluations (--eval.interval)."""
    target: float = 475.0
    """The evaluation return whose first arrival is timed."""
    flags: str = "--offpolicy.n-step 3 --offpolicy.prioritized True"
    """More train flags for both arms (Ape-X's recipe by default; empty: the task's defaults)."""
    out: str | None = None
    """Results directory (default bench_out/apex)."""


def _arm(a: ApexArgs, arm: str, seed: int, out: Path) -> dict[str, Any]:
    run = out / f"{arm}-{a.task}-seed{seed}"
    if run.exists():
        shutil.rmtree(run)
    dist = ["--nproc", str(a.actors + 1), "--dist.strategy", "learner-actor"]
    if arm == "allreduce":
        dist = ["--nproc", str(a.actors)]
    cmd = [*PYTHON_CLI, "train", a.task, "--algorithm", a.algorithm, *dist, *a.flags.split()]
    cmd += ["--agent.total-timesteps", str(a.steps), "--eval.interval", str(a.eval_interval)]
    cmd += ["--seed", str(seed), "--progress", "False", "--tensorboard", "False"]
    cmd += ["--run-dir", str(run)]
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=common.subprocess_env())
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
    evals = [
        (r["wall_time"], r["env_steps"], r["eval/return_mean"])
        for r in read_metrics(run)
        if r.get("eval/return_mean") is not None
    ]
    reached = next((e for e in evals if e[2] >= a.target), None)
    return {
        "arm": arm,
        "seed": seed,
        "wall_s": round(wall, 1),
        "best_eval": max(e[2] for e in evals) if evals else None,
        "last_eval": evals[-1][2] if evals else None,
        "target_wall_s": round(reached[0], 1) if reached else None,
        "target_env_steps": reached[1] if reached else None,
        "curve": evals,
    }


def apex(a: ApexArgs) -> int:
    out = common.out_dir(a.out, "apex")
    machine = common.header(
        f"Ape-X (1 learner + {a.actors} actors) against allreduce on {a.actors} ranks: "
        f"{a.algorithm} on {a.task}, {a.steps:,} env steps"
    )
    runs = []
    for seed in range(1, a.seeds + 1):
        for arm in ("apex", "allreduce"):
            r = _arm(a, arm, seed, out)
            runs.append(r)
            common.console.print(
                f"seed {seed}, {arm}: {r['wall_s']} s, best eval {r['best_eval']}, "
                f"{a.target:g} at {r['target_wall_s']} s"
            )
    rows = [{k: v for k, v in r.items() if k != "curve"} | machine for r in runs]
    common.write_csv(out / "apex.csv", rows)
    summary = []
    for arm in ("apex", "allreduce"):
        mine = [r for r in runs if r["arm"] == arm]
        hits = [r["target_wall_s"] for r in mine if r["target_wall_s"] is not None]
        summary.append(
            {
                "arm": arm,
                "wall_s": statistics.median(r["wall_s"] for r in mine),
                "best_eval": statistics.median(r["best_eval"] or 0.0 for r in mine),
                "last_eval": statistics.median(r["last_eval"] or 0.0 for r in mine),
                "reached": f"{len(hits)} of {len(mine)}",
                "target_wall_s": statistics.median(hits) if hits else None,
            }
        )
    common.show(
        f"medians over {a.seeds} seeds",
        summary,
        [
            ("arm", "arm"),
            ("wall s", "wall_s"),
            ("best eval", "best_eval"),
            ("last eval", "last_eval"),
            (f"reached {a.target:g}", "reached"),
            ("at s", "target_wall_s"),
        ],
    )
    _plot(runs, out / "apex.png", a)
    common.console.print(f"wrote {out / 'apex.csv'} and {out / 'apex.png'}")
    return 0


def _plot(runs: list[dict[str, Any]], path: Path, a: ApexArgs) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for r in runs:
        xs = [c[0] for c in r["curve"]]
        ys = [c[2] for c in r["curve"]]
        style = "-" if r["arm"] == "apex" else "--"
        color = "C0" if r["arm"] == "apex" else "C1"
        label = r["arm"] if r["seed"] == 1 else None
        ax.plot(xs, ys, style, color=color, alpha=0.8, label=label)
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("greedy evaluation return")
    ax.set_title(f"{a.algorithm} on {a.task}: Ape-X (1 + {a.actors}) vs allreduce ({a.actors})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
