"""What a lost rank costs: ``--dist.strategy elastic`` (survivors go on, a replacement rejoins)
against ``allreduce`` under torchrun (every rank restarted, resumed from the newest checkpoint),
with the same failure (slot 2 SIGKILLed on entering iteration 20's update), and what elastic
costs with no failure. Each run is ``distrl train cartpole --nproc 4`` for ``--iterations``
iterations, timed from the launcher's start to its exit; the four kinds interleave, ``--rounds``
times, and the medians are printed.

    python benchmarks/elastic_recovery.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DISTRL = Path(sys.executable).with_name("distrl")


def run(kind: str, iterations: int, workdir: Path) -> tuple[float, float]:
    """(launcher wall time, median time/iteration of the run's records) of one run."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run_dir = workdir / f"{kind}-{time.monotonic_ns()}"
    common = ["--nproc", "4", "--agent.max-iterations", str(iterations), "--progress", "False"]
    common += ["--tensorboard", "False", "--dist.timeout", "10", "--run-dir", str(run_dir)]
    if kind.startswith("elastic"):
        task = ["--import", "tests.fixtures.elastic_faults", "elastic-faults-cartpole"]
        common += ["--dist.strategy", "elastic"]
        if kind == "elastic+kill":
            env["DISTRL_TEST_FAULTS"] = "2:20:KILL"
            common += ["--max-restarts", "1"]
    else:
        task = ["--import", "tests.fixtures.kill_once", "kill-once-cartpole"]
        if kind == "allreduce+kill":
            env.update(
                DISTRL_TEST_KILL_RANK="2",
                DISTRL_TEST_KILL_AT_ITERATION="20",
                DISTRL_TEST_KILL_MARKER=str(run_dir) + ".killed",
            )
            common += ["--max-restarts", "1"]
    t0 = time.perf_counter()
    proc = subprocess.run(
        [str(DISTRL), "train", *task, *common], env=env, capture_output=True, text=True
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(
            f"{kind} failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        )
    records = (run_dir / "metrics.jsonl").read_text().splitlines()
    per_iteration = statistics.median(json.loads(r)["time/iteration"] for r in records)
    return wall, per_iteration


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=60)
    a = ap.parse_args()
    kinds = ["allreduce", "elastic", "allreduce+kill", "elastic+kill"]
    times: dict[str, list[float]] = {k: [] for k in kinds}
    steady: dict[str, list[float]] = {k: [] for k in kinds}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for k in kinds:
                wall, per_iteration = run(k, a.iterations, Path(tmp))
                times[k].append(wall)
                steady[k].append(per_iteration)
                print(
                    f"round {r + 1} {k:15s} {wall:6.2f} s, median iteration "
                    f"{1e3 * per_iteration:.1f} ms",
                    flush=True,
                )
    med = {k: statistics.median(v) for k, v in times.items()}
    it = {k: statistics.median(v) for k, v in steady.items()}
    print(
        f"median iteration (ms): allreduce {1e3 * it['allreduce']:.1f}, elastic "
        f"{1e3 * it['elastic']:.1f} ({100 * (it['elastic'] / it['allreduce'] - 1):+.1f} %)"
    )
    print(f"\nmedians of {a.rounds} (s): " + ", ".join(f"{k} {v:.2f}" for k, v in med.items()))
    print(f"no failure, whole run: elastic {100 * (med['elastic'] / med['allreduce'] - 1):+.1f} %")
    print(
        f"time lost to one failure: allreduce (torchrun restart + resume) "
        f"{med['allreduce+kill'] - med['allreduce']:.2f} s, elastic "
        f"{med['elastic+kill'] - med['elastic']:.2f} s"
    )


if __name__ == "__main__":
    main()
