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

``--side cleanrl`` (or ``all``: the three) runs CleanRL's own single-file script
(``cleanrl/sac_continuous_action.py``, ``td3_continuous_action.py``, ``dqn.py``) from a checkout
of its repository (``--cleanrl``) in a Python with its pinned Gymnasium 0.29.1
(``--cleanrl-python``; docs/benchmarks.md says how to make one), with its own defaults but the
env, seed and steps. Its twin of halfcheetah is HalfCheetah-v4 (0.29.1 has no v5). CleanRL's
script does not evaluate: its return is the mean of its last 10 training episodes (the
stochastic policy, ``return_kind``); its env-steps/s is its own ``SPS`` line, its wall time the
command's, start-up included.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from benchmarks import common
from benchmarks.runs import PYTHON_CLI
from distrl.telemetry import read_metrics

ROOT = Path(__file__).resolve().parents[1]
GYM_TWIN = {"cartpole": "CartPole-v1", "pendulum": "Pendulum-v1", "halfcheetah": "HalfCheetah-v5"}
CLEANRL_TWIN = GYM_TWIN | {"halfcheetah": "HalfCheetah-v4"}  # (its pinned Gymnasium: 0.29.1)
CLEANRL_SCRIPT = {
    "sac": "sac_continuous_action.py",
    "td3": "td3_continuous_action.py",
    "dqn": "dqn.py",
}


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
    side: Literal["both", "all", "distrl", "sb3", "cleanrl"] = "both"
    """both: distrl and SB3; all: distrl, SB3 and CleanRL; or one alone."""
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
    cleanrl: str = ""
    """A checkout of CleanRL's repository (for --side cleanrl or all)."""
    cleanrl_python: str = ".venv-cleanrl/bin/python"
    """A Python with CleanRL's dependencies (Gymnasium 0.29.1, stable-baselines3 < 2.4, tyro)."""
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


def _cleanrl(a: OffPolicyArgs, seed: int, out: Path) -> dict:
    checkout = os.path.abspath(a.cleanrl)  # (it runs in ``out``; abspath keeps a venv's link)
    script = Path(checkout) / "cleanrl" / CLEANRL_SCRIPT[a.algorithm]
    cmd = [os.path.abspath(a.cleanrl_python), str(script), "--env-id", CLEANRL_TWIN[a.task]]
    cmd += ["--seed", str(seed), "--total-timesteps", str(a.steps)]
    env = dict(os.environ, PYTHONPATH=checkout)  # (its scripts import cleanrl_utils from it)
    if a.threads is not None:  # (torch reads it at start-up; the script sets no threads)
        env["OMP_NUM_THREADS"] = str(a.threads)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=out, env=env)
    wall = time.perf_counter() - t0
    (out / f"cleanrl-{a.algorithm}-{a.task}-seed{seed}.log").write_text(proc.stdout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    returns = [float(r) for r in re.findall(r"episodic_return=\[?(-?[\d.e+-]+)", proc.stdout)]
    sps = re.findall(r"SPS: (\d+)", proc.stdout)
    if not returns or not sps:
        raise RuntimeError(f"{' '.join(cmd)} printed no episode or SPS:\n{proc.stdout[-2000:]}")
    last = returns[-10:]
    return {
        "side": "cleanrl",
        "seed": seed,
        "steps": a.steps,
        "wall_s": round(wall, 2),
        "sps": float(sps[-1]),
        "eval_return_mean": round(statistics.fmean(last), 2),
        "eval_return_std": round(statistics.pstdev(last), 2),
    }


SIDES = {"both": ("distrl", "sb3"), "all": ("distrl", "sb3", "cleanrl")}
RETURN_KIND = {"cleanrl": "last 10 training episodes"}  # else: "deterministic, 10 episodes"


def offpolicy(a: OffPolicyArgs) -> list[dict]:
    if a.task not in GYM_TWIN:
        raise ValueError(f"--task {a.task}: choose one of {', '.join(GYM_TWIN)}")
    if a.side == "sb3" and not a.peer_python:
        raise ValueError("--side sb3 runs the peer alone: give its --peer-python")
    sides = SIDES.get(a.side, (a.side,))
    if "sb3" in sides and not a.peer_python:  # both without a peer: distrl alone
        sides = tuple(s for s in sides if s != "sb3")
    if "cleanrl" in sides and not (Path(a.cleanrl) / "cleanrl").is_dir():
        raise ValueError(f"--side {a.side} runs CleanRL's script: give --cleanrl, a checkout")
    if "cleanrl" in sides and a.task not in CLEANRL_TWIN:
        raise ValueError(f"--task {a.task}: CleanRL's twins are {', '.join(CLEANRL_TWIN)}")
    m = common.header("distrl bench offpolicy")
    out = common.out_dir(a.out, "offpolicy")
    run = {
        "distrl": lambda seed: _distrl(a, seed, out),
        "sb3": lambda seed: _peer(a, seed),
        "cleanrl": lambda seed: _cleanrl(a, seed, out),
    }
    rows = []
    for seed in range(a.first_seed, a.first_seed + a.seeds):
        for side in sides:
            rows.append(run[side](seed))
            common.console.print(f"{side} seed {seed}: {rows[-1]}")
    common.write_csv(out / "per_run.csv", rows)
    summary = []
    for side in ("distrl", "sb3", "cleanrl"):
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
                "return_kind": RETURN_KIND.get(side, "deterministic, 10 episodes"),
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
