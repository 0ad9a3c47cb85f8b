"""`distrl bench solve`: training wall time until `episode_return_mean` reaches a target, per
seed, one process each; the median over seeds is the figure we quote."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from distrl.telemetry import read_metrics

# task -> target return (Gymnasium's own thresholds where it defines one)
DEFAULT_TARGETS = {
    "cartpole": 475.0,
    "gym:CartPole-v1": 475.0,
    "pendulum": -200.0,
    "acrobot": -100.0,
}


def time_to_target(records: list[dict], target: float) -> tuple[float | None, int | None]:
    """(wall_time, env_steps) of the first iteration whose return mean reaches ``target``."""
    for r in records:
        ret = r.get("episode_return_mean")
        if ret is not None and ret >= target:
            return float(r["wall_time"]), int(r["env_steps"])
    return None, None


def run_seed(task: str, seed: int, run_dir: Path, extra: list[str], threads: int) -> list[dict]:
    cmd = [
        sys.executable,
        "-m",
        "distrl.cli",
        "train",
        task,
        "--seed",
        str(seed),
        "--run-dir",
        str(run_dir),
        "--progress",
        "False",
        "--tensorboard",
        "False",
        "--threads",
        str(threads),
        *extra,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return read_metrics(run_dir / "metrics.jsonl")
