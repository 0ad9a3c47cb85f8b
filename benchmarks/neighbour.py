"""`distrl bench neighbour`: a task's iteration time alone and beside a second distrl run.

Users run two experiments at once and sweeps run trials side by side; a benchmark that runs
alone hides what that costs. Two processes whose OpenMP threads spin-wait on the same cores
made an update 170x slower (docs/training.md, "Threads"). Per environment setting (``--envs``:
``default`` is `distrl train`'s own, others add variables such as ``OMP_WAIT_POLICY=ACTIVE``),
each run is `distrl train TASK [--nproc N]` with the defaults otherwise (threads included: no
``--threads``), first alone and then beside a neighbour: a second `distrl train` of
``--neighbour`` under the same setting, started first and killed after. Reported per setting:
the median over runs of each run's median ``time/learn`` and ``time/iteration`` (its first
``--skip`` iterations out), and the ratio beside / alone.
"""

from __future__ import annotations

import os
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import common
from distrl.telemetry import read_metrics

WAIT_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS")
"""Left out of the runs' environment unless a setting names them: what the user's shell set
must not decide what `default` measures."""


@dataclass(frozen=True)
class NeighbourArgs:
    task: str = "halfcheetah"
    """Task to time (its tuned defaults)."""
    nproc: int = 1
    """Ranks of the timed run (`distrl train --nproc N`; 1: one process)."""
    iterations: int = 8
    """Iterations of each timed run."""
    skip: int = 2
    """First iterations left out of each run's median (start-up, first-touch allocations)."""
    neighbour: str = "gym:CartPole-v1 --env.vectorization async"
    """The second run: a task and its flags (it trains until killed)."""
    nice: int = 10
    """The neighbour's niceness (0: as the timed run)."""
    envs: str = "default;OMP_WAIT_POLICY=ACTIVE"
    """Settings to compare, separated by ';': 'default', or VAR=VALUE[,VAR=VALUE] added to the
    environment of both runs."""
    runs: int = 3
    """Runs per setting and placement (alone, beside), alternating."""
    sweep: bool = False
    """Time a sweep instead: ``distrl sweep TASK --trials 2`` of two identical trials (a
    one-value space, no pruning), one at a time (``--parallel 1``) and side by side
    (``--parallel 2``), alternating: each trial's median time/learn and time/iteration and the
    sweep's wall time."""
    out: str | None = None
    """Results directory (default bench_out/neighbour)."""


def _settings(text: str) -> list[tuple[str, dict[str, str]]]:
    out = []
    for item in filter(None, (s.strip() for s in text.split(";"))):
        env = {}
        if item != "default":
            for pair in item.split(","):
                key, _, value = pair.partition("=")
                env[key.strip()] = value.strip()
        out.append((item, env))
    return out


def _env(extra: dict[str, str]) -> dict[str, str]:
    base = {k: v for k, v in common.subprocess_env().items() if k not in WAIT_VARIABLES}
    return base | extra


def _train(task_and_flags: list[str], nproc: int, run_dir: Path, iterations: int | None) -> list:
    cmd = [sys.executable, "-m", "distrl.cli", "train", *task_and_flags]
    if nproc > 1:
        cmd += ["--nproc", str(nproc)]
    cmd += ["--progress", "False", "--tensorboard", "False", "--run-dir", str(run_dir)]
    if iterations is not None:
        cmd += ["--agent.max-iterations", str(iterations)]
    return cmd


def _timed(a: NeighbourArgs, env: dict[str, str], run_dir: Path) -> tuple[float, float]:
    """One timed run: (median time/learn, median time/iteration) past the skipped ones."""
    if run_dir.exists():
        subprocess.run(["rm", "-rf", str(run_dir)], check=True)
    cmd = _train([a.task], a.nproc, run_dir, a.iterations)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    recs = read_metrics(run_dir / "metrics.jsonl")[a.skip :]
    learn = statistics.median(r["time/learn"] for r in recs)
    return learn, statistics.median(r["time/iteration"] for r in recs)


def _start_neighbour(a: NeighbourArgs, env: dict[str, str], run_dir: Path) -> subprocess.Popen:
    if run_dir.exists():
        subprocess.run(["rm", "-rf", str(run_dir)], check=True)
    cmd = _train(shlex.split(a.neighbour), 1, run_dir, 10**7)
    if a.nice:
        cmd = ["nice", "-n", str(a.nice), *cmd]
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    deadline = time.monotonic() + 300
    metrics = run_dir / "metrics.jsonl"
    while not (metrics.exists() and metrics.stat().st_size > 0):  # it is training now
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop(proc)
            raise RuntimeError(f"the neighbour ({a.neighbour}) did not start training")
        time.sleep(0.2)
    return proc


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, 9)
    proc.wait()


def _timed_sweep(a: NeighbourArgs, parallel: int, sweep_dir: Path) -> dict[str, float]:
    """One sweep of two identical trials: its wall time and its trials' medians."""
    if sweep_dir.exists():
        subprocess.run(["rm", "-rf", str(sweep_dir)], check=True)
    sweep_dir.mkdir(parents=True)
    space = sweep_dir.parent / "one_value_space.yaml"
    space.write_text("seed: {type: categorical, choices: [1]}\n")
    cmd = [sys.executable, "-m", "distrl.cli", "sweep", a.task, "--trials", "2"]
    cmd += ["--parallel", str(parallel), "--pruner", "none", "--space", str(space)]
    cmd += ["--sweep-dir", str(sweep_dir), "--nproc", str(a.nproc), "--"]
    cmd += ["--agent.max-iterations", str(a.iterations), "--progress", "False"]
    cmd += ["--tensorboard", "False"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=_env({}), capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    trials = [read_metrics(d / "metrics.jsonl")[a.skip :] for d in sweep_dir.glob("trial_*")]
    if len(trials) != 2 or not all(trials):
        raise RuntimeError(f"{sweep_dir}: expected two trials with records past --skip")
    learn = [statistics.median(r["time/learn"] for r in t) for t in trials]
    step = [statistics.median(r["time/iteration"] for r in t) for t in trials]
    return {"wall": wall, "learn": statistics.median(learn), "iter": statistics.median(step)}


def sweep(a: NeighbourArgs) -> None:
    m = common.header(f"{a.task}: a sweep's two trials one at a time and side by side")
    out = common.out_dir(a.out, "neighbour")
    got: dict[int, list[dict[str, float]]] = {1: [], 2: []}
    for i in range(a.runs):
        for parallel in (1, 2) if i % 2 == 0 else (2, 1):
            got[parallel].append(_timed_sweep(a, parallel, out / "sweep"))
    rows = [
        {
            "setting": f"sweep --parallel {parallel}",
            "task": a.task,
            "nproc": a.nproc,
            **{f"{k}_s": statistics.median(x[k] for x in runs) for k in ("learn", "iter", "wall")},
            "runs": a.runs,
            **{f"machine_{k}": v for k, v in m.items()},
        }
        for parallel, runs in got.items()
    ]
    common.write_csv(out / "neighbour_sweep.csv", rows)
    common.show(
        f"{a.task}, --nproc {a.nproc}: two trials of {a.iterations} iterations, medians over "
        f"{a.runs} sweeps",
        rows,
        [
            ("setting", "setting"),
            ("trial learn s", "learn_s"),
            ("trial iteration s", "iter_s"),
            ("sweep wall s", "wall_s"),
        ],
    )
    common.console.print(f"CSV: {out / 'neighbour_sweep.csv'}")


def neighbour(a: NeighbourArgs) -> None:
    if a.sweep:
        sweep(a)
        return
    m = common.header(f"{a.task}: alone and beside a second distrl run ({a.neighbour})")
    out = common.out_dir(a.out, "neighbour")
    rows = []
    for name, extra in _settings(a.envs):
        env = _env(extra)
        got: dict[str, list[tuple[float, float]]] = {"alone": [], "beside": []}
        for i in range(a.runs):
            for place in ("alone", "beside") if i % 2 == 0 else ("beside", "alone"):
                if place == "alone":
                    got[place].append(_timed(a, env, out / "run"))
                    continue
                near = _start_neighbour(a, env, out / "neighbour")
                try:
                    got[place].append(_timed(a, env, out / "run"))
                finally:
                    _stop(near)
        alone = statistics.median(x[0] for x in got["alone"])
        beside = statistics.median(x[0] for x in got["beside"])
        rows.append(
            {
                "setting": name,
                "task": a.task,
                "nproc": a.nproc,
                "learn_alone_s": alone,
                "learn_beside_s": beside,
                "beside_over_alone": beside / alone,
                "iter_alone_s": statistics.median(x[1] for x in got["alone"]),
                "iter_beside_s": statistics.median(x[1] for x in got["beside"]),
                "runs": a.runs,
                **{f"machine_{k}": v for k, v in m.items()},
            }
        )
    common.write_csv(out / "neighbour.csv", rows)
    common.show(
        f"{a.task}, --nproc {a.nproc}: median time/learn and time/iteration over {a.runs} runs",
        rows,
        [
            ("setting", "setting"),
            ("learn alone s", "learn_alone_s"),
            ("learn beside s", "learn_beside_s"),
            ("beside / alone", "beside_over_alone"),
            ("iteration alone s", "iter_alone_s"),
            ("iteration beside s", "iter_beside_s"),
        ],
    )
    common.console.print(f"CSV: {out / 'neighbour.csv'}")
