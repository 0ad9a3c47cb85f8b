"""`distrl bench offpolicy`: an off-policy learner of distrl against Stable-Baselines3's, the
two alternating run by run in the same sitting, at the same env steps.

Each distrl run is `distrl train TASK --algorithm ALGO --agent.total-timesteps STEPS --seed S`
with the algorithm's defaults otherwise (threads included); its deterministic policy is then
scored over 10 episodes with `distrl play` (the greedy one for dqn). Each peer run is
``peers/sb3_offpolicy.py`` (rl-zoo3's settings for the Gymnasium twin of the task) in the
Python of ``--peer-python`` (a venv with stable-baselines3), which trains and scores the same
way. Reported per side: the median training wall time, env-steps/s and final evaluation
return over the seeds, and how many seeds' evaluation reached ``--solved``. ``--side`` runs one
side alone (seeds ``--first-seed`` on); ``--flags`` adds train flags to distrl's runs (a variant
of its defaults).
"""

from __future__ import annotations

import datetime
import json
import re
import shlex
import shutil
import statistics
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from benchmarks import common
from benchmarks.runs import PYTHON_CLI
from distrl.telemetry import read_metrics

ROOT = Path(__file__).resolve().parents[1]
GYM_TWIN = {"cartpole": "CartPole-v1", "pendulum": "Pendulum-v1", "halfcheetah": "HalfCheetah-v5"}


@dataclass(frozen=True)
class OffPolicyArgs:
    algorithm: str = "sac"
    """dqn, sac or td3 (SB3 has each)."""
    task: str = "pendulum"
    """A distrl task with a Gymnasium twin: cartpole (CartPole-v1), pendulum (Pendulum-v1),
    halfcheetah (HalfCheetah-v5: the mujoco extra on both sides)."""
    steps: int = 20_000
    """Env steps of each run (rl-zoo3's: 50k for DQN on CartPole, 20k on Pendulum, 1M on
    HalfCheetah)."""
    seeds: int = 3
    """Seeds per side; the sides alternate run by run."""
    first_seed: int = 0
    """The first seed (the runs take --first-seed, --first-seed + 1, ...)."""
    side: Literal["both", "distrl", "sb3"] = "both"
    """Run both sides, or one alone."""
    flags: str = ""
    """More train flags for distrl's runs (a variant of its defaults), given with "=":
    --flags="--env.num-envs 1 --agent.num-steps 256"."""
    threads: int | None = None
    """Intra-op threads of every run, both sides (default: each side's own, as a user gets)."""
    solved: float = 475.0
    """The evaluation return a seed must reach to count as solved (CartPole: 475 of 500)."""
    peer_python: str = ".venv-sb3/bin/python"
    """A Python with stable-baselines3 (peers/sb3_offpolicy.py's docstring makes one); empty:
    distrl alone."""
    out: str | None = None
    """Results directory (default bench_out/offpolicy)."""


def _distrl(a: OffPolicyArgs, seed: int, out: Path) -> dict:
    run = out / f"distrl-{a.algorithm}-{a.task}-seed{seed}"
    if run.exists():
        shutil.rmtree(run)
    cmd = [*PYTHON_CLI, "train", a.task, "--algorithm", a.algorithm, "--seed", str(seed)]
    cmd += ["--agent.total-timesteps", str(a.steps), "--run-dir", str(run)]
    cmd += ["--progress", "False", "--tensorboard", "False", *shlex.split(a.flags)]
    cmd += [] if a.threads is None else ["--threads", str(a.threads)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    recs = read_metrics(run / "metrics.jsonl")
    wall, steps = float(recs[-1]["wall_time"]), int(recs[-1]["env_steps"])
    play = subprocess.run(
        [*PYTHON_CLI, "play", str(run), "--episodes", "10"], capture_output=True, text=True
    )
    found = re.search(r"return (-?[\d.]+) ± ([\d.]+)", play.stdout)
    if play.returncode != 0 or found is None:
        raise RuntimeError(f"distrl play {run} failed:\n{play.stdout[-2000:]}{play.stderr[-2000:]}")
    return {
        "side": "distrl",
        "seed": seed,
        "steps": steps,
        "wall_s": round(wall, 2),
        "sps": round(steps / wall, 1),
        "eval_return_mean": float(found.group(1)),
        "eval_return_std": float(found.group(2)),
    }


def _peer(a: OffPolicyArgs, seed: int) -> dict:
    cmd = [a.peer_python, str(ROOT / "peers" / "sb3_offpolicy.py"), a.algorithm]
    cmd += [GYM_TWIN[a.task], "--seed", str(seed), "--steps", str(a.steps)]
    cmd += [] if a.threads is None else ["--threads", str(a.threads)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"side": "sb3", **{k: row[k] for k in ("seed", "steps", "wall_s", "sps")}} | {
        "eval_return_mean": row["eval_return_mean"],
        "eval_return_std": row["eval_return_std"],
    }


def offpolicy(a: OffPolicyArgs) -> list[dict]:
    if a.task not in GYM_TWIN:
        raise ValueError(f"--task {a.task}: choose one of {', '.join(GYM_TWIN)}")
    if a.side == "sb3" and not a.peer_python:
        raise ValueError("--side sb3 runs the peer alone: give its --peer-python")
    m = common.header("distrl bench offpolicy")
    out = common.out_dir(a.out, "offpolicy")
    rows = []
    for seed in range(a.first_seed, a.first_seed + a.seeds):
        if a.side != "sb3":
            rows.append(_distrl(a, seed, out))
            common.console.print(f"distrl seed {seed}: {rows[-1]}")
        if a.side != "distrl" and a.peer_python:
            rows.append(_peer(a, seed))
            common.console.print(f"sb3 seed {seed}: {rows[-1]}")
    common.write_csv(out / "per_run.csv", rows)
    summary = []
    for side in ("distrl", "sb3"):
        mine = [r for r in rows if r["side"] == side]
        if not mine:
            continue
        summary.append(
            {
                "side": side,
                "algorithm": a.algorithm,
                "task": a.task,
                "steps": a.steps,
                "runs": len(mine),
                "median_wall_s": statistics.median(r["wall_s"] for r in mine),
                "median_sps": statistics.median(r["sps"] for r in mine),
                "median_eval_return": statistics.median(r["eval_return_mean"] for r in mine),
                "solved": sum(r["eval_return_mean"] >= a.solved for r in mine),
                "flags": a.flags if side == "distrl" else "",
                "threads": a.threads if a.threads is not None else "default",
                "eval_returns": " ".join(f"{r['eval_return_mean']:.1f}" for r in mine),
                "cpu": m["cpu"],
                "cores": m["cores"],
                "torch": m["torch"],
                "date": datetime.date.today().isoformat(),
            }
        )
    common.write_csv(out / "summary.csv", summary)
    cols = ["side", "runs", "solved", "median_wall_s", "median_sps", "median_eval_return"]
    cols += ["eval_returns"]
    common.print_table(f"{a.algorithm} on {a.task}, {a.steps:,} env steps", summary, cols)
    return summary
