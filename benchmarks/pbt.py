"""`distrl bench pbt`: population-based training against the same members left alone, at equal
env steps, the two alternating seed by seed in the same sitting.

Per seed, two commands over the same task, budget and population (``--members``: member 0 has
the task's defaults, the others start from values drawn from the algorithm's ranges with
``--pbt.seed SEED``, every member with its own run seed):

- **fixed**: ``distrl train TASK --population M --pbt.interval STEPS``: one generation, nobody
  copied: M fixed configs, the task's defaults among them; the best of them is what random
  search over the same ranges finds with M trials.
- **pbt**: the same command with ``--pbt.interval INTERVAL``: the same members, ranked every
  INTERVAL env steps, the worst copying the best and exploring.

Both run ``parallel`` members at a time (the population's default for this machine). Reported:
each arm's wall time, its best member's final score (the population's objective: the mean
``episode_return_mean`` of a member's last records), the defaults' final score (member 0 of
the fixed arm), the wall time at which PBT's best member first scored at least the fixed arm's
best, and each arm's best policy scored by ``distrl play`` over 10 episodes.
"""

from __future__ import annotations

import csv
import datetime
import json
import re
import shutil
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import common
from benchmarks.runs import PYTHON_CLI


@dataclass(frozen=True)
class PBTBenchArgs:
    task: str = "pendulum"
    """The task: its defaults are member 0."""
    steps: int = 800_000
    """Env steps of each member (--agent.total-timesteps)."""
    members: int = 4
    """Members of each population (and fixed configs)."""
    interval: int = 100_000
    """PBT's generation in env steps (--pbt.interval)."""
    seeds: int = 3
    """Seeds: the run seed and --pbt.seed of both arms."""
    out: str | None = None
    """Results directory (default bench_out/pbt)."""


def _rows(run: Path) -> list[dict[str, str]]:
    with (run / "pbt.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def _play(run: Path) -> float:
    play = subprocess.run(
        [*PYTHON_CLI, "play", str(run), "--episodes", "10"], capture_output=True, text=True
    )
    found = re.search(r"return (-?[\d.]+) ±", play.stdout)
    if play.returncode != 0 or found is None:
        raise RuntimeError(f"distrl play {run} failed:\n{play.stdout[-2000:]}{play.stderr[-2000:]}")
    return float(found.group(1))


def _arm(a: PBTBenchArgs, seed: int, interval: int, out: Path, name: str) -> dict:
    run = out / f"{name}-{a.task}-seed{seed}"
    if run.exists():
        shutil.rmtree(run)
    cmd = [*PYTHON_CLI, "train", a.task, "--population", str(a.members)]
    cmd += ["--pbt.interval", str(interval), "--pbt.seed", str(seed), "--seed", str(seed)]
    cmd += ["--agent.total-timesteps", str(a.steps), "--run-dir", str(run)]
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
    rows = _rows(run)
    last = max(int(r["generation"]) for r in rows)
    final = {int(r["member"]): float(r["score"]) for r in rows if int(r["generation"]) == last}
    best = max(final, key=lambda k: final[k])
    curve: dict[int, tuple[float, int, float]] = {}  # generation -> (wall, env steps, best)
    for r in rows:
        g = int(r["generation"])
        score = float(r["score"]) if r["score"] else float("-inf")
        prev = curve.get(g, (0.0, 0, float("-inf")))
        curve[g] = (float(r["wall_s"]), int(r["env_steps"]), max(prev[2], score))
    return {
        "arm": name,
        "seed": seed,
        "wall_s": round(wall, 1),
        "best_member": best,
        "best_score": round(final[best], 2),
        "best_score_exact": final[best],
        "defaults_score": round(final[0], 2),
        "play_best": _play(run / f"member_{best}"),
        "curve": [curve[g] for g in sorted(curve)],
        "run_dir": str(run),
    }


def pbt(a: PBTBenchArgs) -> int:
    out = common.out_dir(a.out, "pbt")
    common.header(f"PBT against {a.members} fixed configs: {a.task}, {a.steps} steps per member")
    results = []
    for seed in range(a.seeds):
        order = [("fixed", a.steps), ("pbt", a.interval)]
        for name, interval in order if seed % 2 == 0 else order[::-1]:
            r = _arm(a, seed, interval, out, name)
            results.append(r)
            shown = {k: v for k, v in r.items() if k != "curve"}
            print(json.dumps(shown), flush=True)
    for r in results:
        if r["arm"] == "pbt":
            fixed = next(f for f in results if f["arm"] == "fixed" and f["seed"] == r["seed"])
            reached = [w for w, _, s in r["curve"] if s >= fixed["best_score_exact"]]
            r["wall_to_fixed_best_s"] = round(reached[0], 1) if reached else None
    summary: dict[str, Any] = {"task": a.task, "steps_per_member": a.steps, "members": a.members,
               "interval": a.interval, "date": datetime.date.today().isoformat(),
               "machine": common.machine()}  # fmt: skip
    for arm in ("fixed", "pbt"):
        rs = [r for r in results if r["arm"] == arm]
        summary[arm] = {
            "wall_s": statistics.median(r["wall_s"] for r in rs),
            "best_score": statistics.median(r["best_score"] for r in rs),
            "play_best": statistics.median(r["play_best"] for r in rs),
            "per_seed": [{k: v for k, v in r.items() if k != "curve"} for r in rs],
        }
    summary["defaults_score"] = statistics.median(
        r["defaults_score"] for r in results if r["arm"] == "fixed"
    )
    (out / "results.json").write_text(json.dumps({"summary": summary, "runs": results}, indent=1))
    common.write_csv(out / "per_run.csv", [{k: v for k, v in r.items() if k != "curve"}
                                           for r in results])  # fmt: skip
    common.write_csv(out / "curve.csv", [
        {"arm": r["arm"], "seed": r["seed"], "generation": g, "wall_s": w, "env_steps": e,
         "best_score": s} for r in results for g, (w, e, s) in enumerate(r["curve"])
    ])  # fmt: skip
    common.write_csv(out / "summary.csv", [
        {"arm": arm, "task": a.task, "steps_per_member": a.steps, "members": a.members,
         "seeds": a.seeds, **{k: v for k, v in summary[arm].items() if k != "per_seed"}}
        for arm in ("fixed", "pbt")
    ])  # fmt: skip
    _plot(results, out / "pbt_vs_fixed.png", a)
    print(json.dumps({k: v for k, v in summary.items()}, indent=1))
    return 0


def _plot(results: list[dict], path: Path, a: PBTBenchArgs) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for r in results:
        walls, _, scores = zip(*r["curve"], strict=True)
        style = "-" if r["arm"] == "pbt" else "--"
        ax.plot(walls, scores, style, marker="o", ms=3,
                label=f"{r['arm']} seed {r['seed']}")  # fmt: skip
    ax.set_xlabel("wall time, s")
    ax.set_ylabel("best member's score")
    ax.set_title(f"{a.task}: PBT vs {a.members} fixed configs, {a.steps} steps per member")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
