"""`distrl bench sb3-api`: one Stable-Baselines3 script, run with SB3's PPO and with
``distrl.PPO``, the two alternating run by run in the same sitting (``peers/same_script_ppo.py``:
SB3's quickstart on CartPole-v1 with its defaults; only the import differs).

The SB3 side runs in the Python of ``--peer-python`` (a venv with stable-baselines3), the distrl
side in this one. Each run prints the wall time of ``learn``, env-steps/s, and the deterministic
policy's mean return over the same 10 Gymnasium episodes. Reported per side: the medians over
the seeds, every seed's return, and the ratio of wall times.
"""

from __future__ import annotations

import datetime
import json
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmarks import common

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "peers" / "same_script_ppo.py"


@dataclass(frozen=True)
class SB3ApiArgs:
    algo: str = "ppo"
    """ppo or dqn: the class the script builds (SB3's defaults either way)."""
    steps: int = 100_000
    """Env steps of each run (SB3's quickstart trains CartPole for 10k; 100k reaches 500)."""
    seeds: int = 3
    """Seeds per side; the sides alternate run by run."""
    peer_python: str = ".venv-sb3/bin/python"
    """A Python with stable-baselines3 (peers/sb3_ppo.py's docstring makes one); empty:
    distrl alone."""
    out: str | None = None
    """Results directory (default bench_out/sb3_api)."""


def _run(python: str, lib: str, seed: int, a: SB3ApiArgs, cwd: Path) -> dict:
    cmd = [python, str(SCRIPT), lib, "--seed", str(seed), "--steps", str(a.steps)]
    cmd += ["--algo", a.algo]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)  # runs/ under --out
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def sb3_api(a: SB3ApiArgs) -> list[dict]:
    if a.algo not in ("ppo", "dqn"):
        raise ValueError(f"--algo {a.algo}: ppo or dqn")
    if a.peer_python and not Path(a.peer_python).exists():
        raise ValueError(f"--peer-python {a.peer_python}: not found (a venv with SB3)")
    peer = str(Path(a.peer_python).absolute())  # the runs start in --out
    sides = [(sys.executable, "distrl")] + ([(peer, "sb3")] if a.peer_python else [])
    m = common.header("distrl bench sb3-api")
    out = common.out_dir(a.out, f"sb3_api_{a.algo}")
    rows = []
    for seed in range(a.seeds):
        for python, lib in sides:
            rows.append(_run(python, lib, seed, a, out))
            common.console.print(f"{lib} seed {seed}: {rows[-1]}")
    common.write_csv(out / "per_run.csv", rows)
    summary = []
    for _, lib in sides:
        mine = [r for r in rows if r["lib"] == lib]
        summary.append({
            "lib": lib, "algo": a.algo, "steps": a.steps, "runs": len(mine),
            "median_wall_s": statistics.median(r["wall_s"] for r in mine),
            "median_sps": statistics.median(r["sps"] for r in mine),
            "median_eval_return": statistics.median(r["eval_return_mean"] for r in mine),
            "eval_returns": " ".join(f"{r['eval_return_mean']:.1f}" for r in mine),
            "cpu": m["cpu"], "cores": m["cores"], "torch": m["torch"],
            "date": datetime.date.today().isoformat(),
        })  # fmt: skip
    if len(summary) == 2:
        ratio = summary[0]["median_wall_s"] / summary[1]["median_wall_s"]
        summary[0]["wall_ratio_to_sb3"] = summary[1]["wall_ratio_to_sb3"] = round(ratio, 3)
    common.write_csv(out / "summary.csv", summary)
    cols = ["lib", "runs", "median_wall_s", "median_sps", "median_eval_return", "eval_returns"]
    title = f"the same SB3 script, {a.algo.upper()} on CartPole-v1, {a.steps:,} env steps"
    common.print_table(title, summary, cols)
    return summary
