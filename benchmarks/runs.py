"""Training runs for the benchmarks: `distrl train` in fresh processes (torchrun for W > 1), each
in its own session so that a timeout or Ctrl-C kills the whole process group, ranks included.
Shared by `bench scaling` and `bench learn`."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import common


def per_rank_envs(total_or_rank: int, world: int, mode: str) -> int:
    """Envs each rank runs: ``total_or_rank`` per rank (weak) or divided by W (strong)."""
    if mode == "weak":
        return total_or_rank
    if total_or_rank % world:
        raise ValueError(
            f"strong scaling divides --num-envs {total_or_rank} by W={world}, which does not "
            f"divide it; pick a multiple of every world size (e.g. "
            f"{total_or_rank - total_or_rank % world + world})"
        )
    return total_or_rank // world


def quiet_train_args(threads: int) -> list[str]:
    """`train` flags of every benchmark run: no live display, no TensorBoard, and ``threads``
    intra-op threads per process (0: distrl's default, cores / local world size, as a plain
    `distrl train` runs)."""
    fixed = ["--threads", str(threads)] if threads else []
    return ["--progress", "False", "--tensorboard", "False", *fixed]


PYTHON_CLI = [sys.executable, "-m", "distrl.cli"]
"""`distrl` as this interpreter runs it (no console script needed on PATH)."""


def _env() -> dict[str, str]:
    return common.subprocess_env({"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"})


def _kill(procs: list[subprocess.Popen]) -> None:
    """Kill each run's whole process group (torchrun's agent and its ranks)."""
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def _wait(procs: list[subprocess.Popen], logs: list[Path], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    try:
        for p in procs:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _kill(procs)
        raise RuntimeError(f"{what} took longer than {timeout:g} s (see {logs[0]})") from None
    except BaseException:  # Ctrl-C: the runs are in their own sessions, so stop them here
        _kill(procs)
        raise
    bad = [(p, log) for p, log in zip(procs, logs, strict=True) if p.returncode != 0]
    if bad:
        p, log = bad[0]
        tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
        raise RuntimeError(f"{what} failed (exit {p.returncode}, log {log}):\n{tail}")


def _start(cmd: list[str], log, env: dict[str, str] | None = None) -> subprocess.Popen:
    # own session: a timeout or Ctrl-C kills the run's process group, ranks included
    return subprocess.Popen(
        cmd,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=dict(_env(), **(env or {})),
        start_new_session=True,
    )


def _fresh(run_dir: Path) -> Path:
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    return run_dir


def _train_command(task: str, train_args: list[str], seed: int, run_dir: Path) -> list[str]:
    """``train`` arguments of one run (without the interpreter or launcher in front)."""
    return ["train", task, *train_args, "--seed", str(seed), "--run-dir", str(run_dir)]


def run_training(
    task: str,
    world: int,
    train_args: list[str],
    run_dir: Path,
    timeout: float,
    seed: int = 0,
    iterations: int | None = None,
    env: dict[str, str] | None = None,
) -> list[dict]:
    """One training run of ``world`` ranks (torchrun for W>1); returns rank 0's metrics.
    With ``iterations``, a failed exit after that many logged iterations only warns. ``env``:
    variables the run gets on top of this process's."""
    from distrl.distributed import launch
    from distrl.telemetry import read_metrics

    _fresh(run_dir)
    args = _train_command(task, train_args, seed, run_dir)
    if world == 1:
        cmd = [*PYTHON_CLI, *args]
    else:
        cmd = launch.torchrun_command(world, 0, [*args, "--distributed", "True"])
    log = run_dir / "launch.log"
    with log.open("w") as f:
        p = _start(cmd, f, env)
        try:
            _wait([p], [log], timeout, f"W={world} run")
        except RuntimeError:
            recs = _complete_metrics(run_dir, iterations)
            if recs is None:
                raise
            common.console.print(
                f"[yellow]warning: W={world} run exited {p.returncode} after logging all "
                f"{iterations} iterations (teardown); measurements kept, see {log}"
            )
            return recs
    return read_metrics(run_dir / "metrics.jsonl")


def _complete_metrics(run_dir: Path, iterations: int | None) -> list[dict] | None:
    """The metrics of a run that failed after logging all ``iterations``, else None.

    A rank that dies in process-group teardown after the last iteration was logged leaves a
    complete measurement; the caller keeps it, says so, and fails on anything else."""
    from distrl.telemetry import read_metrics

    metrics = run_dir / "metrics.jsonl"
    recs = read_metrics(metrics) if metrics.exists() else []
    if iterations is None or not recs or recs[-1].get("iteration") != iterations:
        return None
    return recs


def run_independent(
    task: str, count: int, train_args: list[str], run_dir: Path, timeout: float, seed: int = 0
) -> list[list[dict]]:
    """``count`` single processes started together (seeds seed+i, like ranks); their metrics."""
    from distrl.telemetry import read_metrics

    _fresh(run_dir)
    procs, logs, dirs = [], [], []
    files = []
    try:
        for i in range(count):
            d = run_dir / f"p{i}"
            d.mkdir()
            cmd = [*PYTHON_CLI, *_train_command(task, train_args, seed + i, d)]
            log = d / "launch.log"
            f = log.open("w")
            files.append(f)
            procs.append(_start(cmd, f))
            logs.append(log)
            dirs.append(d)
        _wait(procs, logs, timeout, f"ceiling run of {count} processes")
    finally:
        for f in files:
            f.close()
    return [read_metrics(d / "metrics.jsonl") for d in dirs]
