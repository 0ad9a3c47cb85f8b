"""Faults under the real launcher (`distrl train --nproc 3`: torchrun, its elastic agent, Gloo).

A worker that stalls (SIGSTOP) under a strategy that tolerates lost workers is dropped by name,
training finishes, the dropped rank is woken and leaves with exit 0, and the launcher exits 0:
torchrun's agent would otherwise wait for the stopped process forever. A worker process that is
killed (SIGKILL) is torchrun's to handle: its agent stops every rank and, with --max-restarts and
--resume auto, restarts them from the newest checkpoint, and the run still finishes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import BIN, QUIET

pytestmark = pytest.mark.slow

ARGS = ["--env.num-envs", "64", "--dist.timeout", "5", "--agent.max-iterations", "60", *QUIET]


def records(run: Path) -> list[dict]:
    path = run / "metrics.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _descends_from(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        pid = _parent(pid)
    return False


def rank_pid(launcher: int, rank: int) -> int:
    """The pid of ``rank`` among the launcher's descendants (RANK in its environment)."""
    for pid in map(int, filter(str.isdigit, os.listdir("/proc"))):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            if f"RANK={rank}".encode() in env and _descends_from(pid, launcher):
                return pid
        except OSError:  # gone, or not ours to read
            continue
    raise AssertionError(f"no process of rank {rank} under launcher {launcher}")


def run_with_fault(tmp_path: Path, flags: list[str], sig: signal.Signals) -> tuple[int, str]:
    """Start the launcher, wait until 12 iterations are logged, send ``sig`` to rank 2, wait
    for the launcher (hard limit 150 s, then the whole session is killed)."""
    run = tmp_path / "run"
    cmd = [str(BIN / "distrl"), "train", "cartpole", "--nproc", "3", *flags, *ARGS]
    proc = subprocess.Popen(
        [*cmd, "--run-dir", str(run)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 90
        while len(records(run)) < 12:
            assert proc.poll() is None and time.monotonic() < deadline, "training did not start"
            time.sleep(0.2)
        os.kill(rank_pid(proc.pid, 2), sig)
        out, _ = proc.communicate(timeout=150)
        return proc.returncode, out
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()


def assert_finished(tmp_path: Path) -> None:
    recs = records(tmp_path / "run")
    assert recs[-1]["iteration"] == 60, recs[-1]
    assert (tmp_path / "run" / "checkpoints" / "ckpt_00000060.pt").exists()


@pytest.mark.long  # 30 s: make test keeps to about 10 minutes; CI runs it
@pytest.mark.timeout(300)
def test_a_stopped_parameter_server_worker_is_dropped_and_the_run_finishes(tmp_path):
    code, out = run_with_fault(tmp_path, ["--dist.strategy", "ps-asp"], signal.SIGSTOP)
    assert code == 0, out[-4000:]
    assert "parameter server: dropped worker rank 2" in out, out[-4000:]
    assert "rank 2: dropped from the run" in out, out[-4000:]  # woken, it left with exit 0
    assert_finished(tmp_path)
    assert records(tmp_path / "run")[-1]["dist/workers"] == 1


@pytest.mark.long  # 17 s: as above
@pytest.mark.timeout(300)
def test_a_stopped_actor_is_dropped_and_the_run_finishes(tmp_path):
    code, out = run_with_fault(tmp_path, ["--dist.strategy", "learner-actor"], signal.SIGSTOP)
    assert code == 0, out[-4000:]
    assert "learner rank 0: dropped actor rank 2" in out, out[-4000:]
    assert "rank 2: dropped from the run" in out, out[-4000:]
    assert_finished(tmp_path)
    assert records(tmp_path / "run")[-1]["dist/actors"] == 1


@pytest.mark.long  # 16 s: make test keeps to about 10 minutes; CI runs it
@pytest.mark.timeout(300)
def test_a_killed_worker_is_restarted_by_torchrun_and_the_run_resumes(tmp_path):
    flags = ["--dist.strategy", "ps-bap", "--agent.save-interval", "5"]
    flags += ["--max-restarts", "1", "--resume", "auto"]
    code, out = run_with_fault(tmp_path, flags, signal.SIGKILL)
    assert code == 0, out[-4000:]
    assert "resume: loaded" in out, out[-4000:]  # the newest checkpoint before the restart
    assert_finished(tmp_path)
