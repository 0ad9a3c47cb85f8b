"""`distrl bench startup`: where the time from the command to the first iteration goes.

Each run is a fresh `distrl train TASK --agent.max-iterations K` with the defaults otherwise
(threads, TensorBoard and the console's progress display included: what a user's command pays),
``--runs`` times. The phases are the run's own marks (``startup/<phase>`` in its first record,
``distrl.startup`` names them); beside them, timed from here: the command's wall time, the
interpreter alone (``python -c pass``), and ``import torch`` alone in a fresh interpreter, the
floor no change to distrl can cut. "after" is what follows the last record: the final
checkpoint, the summary and the process's exit. Reported: each phase's median over the runs.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import common
from distrl.startup import PHASES
from distrl.telemetry import read_metrics


@dataclass(frozen=True)
class StartupArgs:
    task: str = "cartpole"
    """Task to start (its tuned defaults)."""
    iterations: int = 2
    """Iterations of each run (the first one's one-time costs show against the second's)."""
    runs: int = 5
    """Fresh runs; the floors (interpreter, import torch) are timed between them."""
    extra: tuple[str, ...] = ()
    """Extra `train` flags, e.g. --extra="--tensorboard False" (split like a shell)."""
    out: str | None = None
    """Results directory (default bench_out/startup)."""


def _wall(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=common.subprocess_env(), capture_output=True)
    return time.perf_counter() - t0


def _one_run(a: StartupArgs, run_dir: Path) -> dict[str, float]:
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = [sys.executable, "-m", "distrl.cli", "train", a.task, "--run-dir", str(run_dir)]
    cmd += ["--agent.max-iterations", str(a.iterations), *common.split_extra(a.extra)]
    t0, unix0 = time.perf_counter(), time.time()
    proc = subprocess.run(cmd, env=common.subprocess_env(), capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    recs = read_metrics(run_dir / "metrics.jsonl")
    first, last = recs[0], recs[-1]
    row = {
        k.removeprefix("startup/"): float(v) for k, v in first.items() if k.startswith("startup/")
    }
    row |= {
        "command_to_first_record": first["unix_time"] - unix0,
        "later_iteration": statistics.median(r["time/iteration"] for r in recs[1:])
        if len(recs) > 1
        else float("nan"),
        "after": unix0 + wall - last["unix_time"],
        "wall": wall,
    }
    return row


def startup(a: StartupArgs) -> list[dict]:
    m = common.header(f"distrl bench startup: {a.task}, from the command to the first iteration")
    out = common.out_dir(a.out, "startup")
    runs, python, torch_ = [], [], []
    for _ in range(a.runs):
        python.append(_wall([sys.executable, "-c", "pass"]))
        torch_.append(_wall([sys.executable, "-c", "import torch"]))
        runs.append(_one_run(a, out / "run"))
    keys = [*PHASES, "total", "command_to_first_record", "later_iteration", "after", "wall"]
    med = {
        k: statistics.median(r[k] for r in runs if k in r)
        for k in keys
        if any(k in r for r in runs)
    }
    rows = [{"phase": k, "median_s": v, "runs": a.runs} for k, v in med.items()]
    rows += [
        {"phase": "floor: python -c pass", "median_s": statistics.median(python), "runs": a.runs},
        {
            "phase": "floor: python -c 'import torch'",
            "median_s": statistics.median(torch_),
            "runs": a.runs,
        },
    ]
    for r in rows:
        r |= {"task": a.task, **{f"machine_{k}": v for k, v in m.items()}}
    common.write_csv(out / "startup.csv", rows)
    common.write_csv(out / "startup_runs.csv", runs)
    common.show(
        f"{a.task}: start-up phases, median of {a.runs} fresh runs",
        rows,
        [("phase", "phase"), ("seconds", "median_s")],
    )
    common.console.print(f"CSV: {out / 'startup.csv'}")
    return rows
