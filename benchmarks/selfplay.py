"""`distrl bench selfplay`: Connect Four by self-play (`distrl train connect-four`, its defaults)
over seeds: the greedy policy's win rate against the random player and the scripted one (the
`selfplay/*` records, 200 games every 10 iterations) over env steps and wall time, the league's
Elo ratings, and the env steps and wall time at which the win rate against random first reached
``--target`` (RLlib's self-play example asks 0.95 within 2M env steps). Writes results.json and
selfplay.png (win rates and ratings over env steps, every seed)."""

from __future__ import annotations

import datetime
import json
import shutil
import statistics
import subprocess
from dataclasses import dataclass
from pathlib import Path

from benchmarks import common
from benchmarks.runs import PYTHON_CLI
from distrl.telemetry import read_metrics


@dataclass(frozen=True)
class SelfPlayArgs:
    seeds: int = 3
    """Seeds, one run each."""
    nproc: int = 1
    """Ranks per run."""
    target: float = 0.95
    """The win rate against the random player to reach."""
    iterations: int | None = None
    """--agent.max-iterations (default: the task's, 2M env steps)."""
    num_envs: int | None = None
    """--env.num-envs (default: the task's, 256)."""
    out: str | None = None
    """Results directory (default bench_out/selfplay)."""


def _run(a: SelfPlayArgs, seed: int, out: Path) -> dict:
    run = out / f"connect-four-seed{seed}"
    if run.exists():
        shutil.rmtree(run)
    cmd = [*PYTHON_CLI, "train", "connect-four", "--seed", str(seed), "--run-dir", str(run)]
    cmd += ["--nproc", str(a.nproc), "--progress", "False"]
    if a.iterations is not None:
        cmd += ["--agent.max-iterations", str(a.iterations)]
    if a.num_envs is not None:
        cmd += ["--env.num-envs", str(a.num_envs)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    recs = read_metrics(run / "metrics.jsonl")
    evals = [r for r in recs if "selfplay/win_vs_random" in r]
    reached = next((r for r in evals if r["selfplay/win_vs_random"] >= a.target), None)
    curve = [
        {
            k: r.get(k)
            for k in (
                "env_steps",
                "wall_time",
                "selfplay/win_vs_random",
                "selfplay/win_vs_lookahead",
                "selfplay/loss_vs_lookahead",
                "league/elo",
                "league/elo_random",
            )
        }  # fmt: skip
        for r in evals
    ]
    last = evals[-1]
    return {
        "seed": seed,
        "env_steps": int(recs[-1]["env_steps"]),
        "wall_s": round(float(recs[-1]["wall_time"]), 1),
        "final_win_vs_random": last["selfplay/win_vs_random"],
        "final_win_vs_lookahead": last["selfplay/win_vs_lookahead"],
        "final_loss_vs_lookahead": last["selfplay/loss_vs_lookahead"],
        "final_elo": last.get("league/elo"),
        "target_env_steps": None if reached is None else int(reached["env_steps"]),
        "target_wall_s": None if reached is None else round(float(reached["wall_time"]), 1),
        "curve": curve,
    }


def selfplay(a: SelfPlayArgs) -> int:
    out = common.out_dir(a.out, "selfplay")
    common.header(f"connect-four self-play, {a.seeds} seeds on {a.nproc} rank(s)")
    runs = []
    for seed in range(a.seeds):
        r = _run(a, seed, out)
        runs.append(r)
        print(json.dumps({k: v for k, v in r.items() if k != "curve"}), flush=True)
    reached = [r for r in runs if r["target_env_steps"] is not None]
    summary = {
        "date": datetime.date.today().isoformat(),
        "machine": common.machine(),
        "nproc": a.nproc,
        "target": a.target,
        "reached": f"{len(reached)} of {len(runs)}",
        "median_target_env_steps": statistics.median(r["target_env_steps"] for r in reached)
        if reached else None,
        "median_target_wall_s": statistics.median(r["target_wall_s"] for r in reached)
        if reached else None,
        "median_final_win_vs_random": statistics.median(r["final_win_vs_random"] for r in runs),
        "median_final_win_vs_lookahead": statistics.median(
            r["final_win_vs_lookahead"] for r in runs
        ),
        "median_wall_s": statistics.median(r["wall_s"] for r in runs),
    }  # fmt: skip
    (out / "results.json").write_text(json.dumps({"summary": summary, "runs": runs}, indent=1))
    common.write_csv(out / "per_run.csv", [{k: v for k, v in r.items() if k != "curve"}
                                           for r in runs])  # fmt: skip
    common.write_csv(out / "curve.csv", [{"seed": r["seed"], **c} for r in runs
                                         for c in r["curve"]])  # fmt: skip
    common.write_csv(out / "summary.csv", [{k: v for k, v in summary.items() if k != "machine"}])
    _plot(runs, out / "selfplay.png")
    print(json.dumps(summary, indent=1))
    return 0


def _plot(runs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    for r in runs:
        steps = [c["env_steps"] for c in r["curve"]]
        ax.plot(steps, [c["selfplay/win_vs_random"] for c in r["curve"]], "-",
                label=f"vs random, seed {r['seed']}")  # fmt: skip
        ax.plot(steps, [c["selfplay/win_vs_lookahead"] for c in r["curve"]], "--",
                label=f"vs scripted, seed {r['seed']}")  # fmt: skip
        bx.plot(steps, [c["league/elo"] for c in r["curve"]], label=f"learner, seed {r['seed']}")
        bx.plot(steps, [c["league/elo_random"] for c in r["curve"]], ":",
                label=f"random player, seed {r['seed']}")  # fmt: skip
    ax.set_ylabel("greedy win rate (200 games)")
    ax.legend(fontsize=7)
    bx.set_ylabel("Elo")
    bx.set_xlabel("env steps (the learner's moves)")
    bx.legend(fontsize=7)
    fig.suptitle("connect-four: self-play against a league")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
