"""The gradient all-reduce overlapped with backward (``--dist.overlap``) against the one call
after it, on the same task and ranks, runs alternating.

    distrl bench overlap --tasks minatar-breakout,cartpole --runs 5 --nproc 2

Each run is ``distrl train <task> --nproc N --agent.max-iterations I`` with and without
``--dist.overlap True --dist.bucket-mb B``, in turns (off, on, off, on, ...) so that load from
other processes falls on both alike. Per run the medians of ``time/iteration``, ``time/learn`` and
``time/comm`` over its iterations after the first (warm-up); reported: the median over runs.
Results: a table and ``--out``/overlap.csv.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import common


@dataclass(frozen=True)
class OverlapArgs:
    tasks: str = "minatar-breakout,cartpole"
    """Tasks, each with its own default network (minatar-breakout: the minatar-cnn)."""
    runs: int = 5
    """Runs per setting and task, alternating."""
    nproc: int = 2
    """Ranks of each run."""
    iterations: int = 8
    """Iterations per run (the first is left out as warm-up)."""
    bucket_mb: float = 1.0
    """--dist.bucket-mb of the overlapped runs."""
    out: str | None = None
    """Results directory (default bench_out/overlap)."""


def _run(task: str, a: OverlapArgs, overlap: bool, run_dir: Path) -> dict[str, float]:
    cmd = [sys.executable, "-m", "distrl.cli", "train", task, "--nproc", str(a.nproc)]
    cmd += ["--agent.max-iterations", str(a.iterations), "--agent.save-interval", "100000"]
    cmd += ["--progress", "False", "--tensorboard", "False", "--run-dir", str(run_dir)]
    if overlap:
        cmd += ["--dist.overlap", "True", "--dist.bucket-mb", str(a.bucket_mb)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=common.subprocess_env())
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rows = rows[1:]  # warm-up
    return {
        k: common.median(r[f"time/{k}"] for r in rows) or 0.0
        for k in ("iteration", "learn", "comm")
    }


def overlap(a: OverlapArgs) -> list[dict[str, Any]]:
    m = common.header(f"all-reduce overlapped with backward, {a.nproc} ranks")
    out = common.out_dir(a.out, "overlap")
    rows: list[dict[str, Any]] = []
    for task in a.tasks.split(","):
        per: dict[bool, list[dict[str, float]]] = {False: [], True: []}
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(a.runs):
                for on in (False, True):
                    per[on].append(_run(task, a, on, Path(tmp) / f"{on}-{i}"))
        for on in (False, True):
            row: dict[str, Any] = {"task": task, "overlap": on, "runs": a.runs}
            for k in ("iteration", "learn", "comm"):
                row[f"{k}_s"] = common.median(r[k] for r in per[on])
                row[f"{k}_all"] = " ".join(f"{r[k]:.3f}" for r in per[on])
            rows.append(row | {"cpu": m["cpu"], "cores": m["cores"]})
    common.write_csv(out / "overlap.csv", rows)
    cols = [("task", "task"), ("overlap", "overlap"), ("runs", "runs")]
    cols += [("iteration s", "iteration_s"), ("learn s", "learn_s"), ("comm s", "comm_s")]
    common.show("median over runs of each run's median iteration (warm-up left out)", rows, cols)
    return rows
