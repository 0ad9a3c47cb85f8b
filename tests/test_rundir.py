"""One run per directory: a live run holds its directory's lock (``rundir.RunLock``), a second
run there is refused naming the holder, a finished or killed run leaves no stale lock, and
default run directories never collide (two runs started in the same second)."""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from distrl import args
from distrl.rundir import LOCK_FILE, RunLock, check_unlocked
from tests.distributed.workers import cli_env, run_cli
from tests.helpers import BIN, tiny_train_args


def test_a_second_lock_on_a_run_directory_is_refused_naming_the_holder(tmp_path: Path):
    held = RunLock(tmp_path / "run")
    with pytest.raises(ValueError, match=f"in use by a live run \\(pid {os.getpid()} on "):
        RunLock(tmp_path / "run")
    with pytest.raises(ValueError, match="choose another --run-dir"):
        check_unlocked(tmp_path / "run")
    held.release()
    RunLock(tmp_path / "run").release()  # free again once released
    check_unlocked(tmp_path / "run")


def test_default_run_directories_started_in_the_same_second_differ(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    class Frozen(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return cls(2026, 11, 27, 1, 2, 3)

    monkeypatch.setattr(args.datetime, "datetime", Frozen)
    first, second = args.default_run_dir("cartpole"), args.default_run_dir("cartpole")
    assert first != second and first.is_dir() and second.is_dir()
    assert (first.name, second.name) == ("20261127-010203", "20261127-010203-2")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_second_run_on_a_live_runs_directory_is_refused_and_a_killed_run_frees_it(tmp_path):
    run = tmp_path / "run"
    cmd = [str(BIN / "distrl"), "train", "cartpole", "--run-dir", str(run)]
    live = subprocess.Popen(
        [*cmd, *tiny_train_args(8, max_iterations=100000)],
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (run / "metrics.jsonl").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert (run / "metrics.jsonl").exists(), "the first run never started"
        again = [*cmd, "--resume", "auto", *tiny_train_args(8, max_iterations=3)]
        code, out, err, _ = run_cli(again, timeout=60)
        assert code == 2, out + err
        assert f"in use by a live run (pid {live.pid} on " in err, err
    finally:
        os.killpg(live.pid, signal.SIGKILL)
        live.wait()
    assert (run / LOCK_FILE).exists()
    check_unlocked(run)  # the kernel dropped the killed run's lock


def test_a_run_that_ends_leaves_no_lock_file_and_a_new_holder_takes_a_new_one(tmp_path):
    """RUN/.lock stayed after a clean exit though the docs say it is held while a run trains."""
    lock = RunLock(tmp_path)
    assert (tmp_path / LOCK_FILE).exists()
    with pytest.raises(ValueError, match="in use by a live run"):
        RunLock(tmp_path)
    lock.release()
    assert not (tmp_path / LOCK_FILE).exists()
    again = RunLock(tmp_path)  # a fresh file and lock
    assert (tmp_path / LOCK_FILE).exists()
    again.release()


def test_a_run_dir_that_cannot_be_written_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    """A resume on a full or read-only disk ended in a raw OSError traceback."""
    import errno

    from distrl import rundir
    from tests.helpers import run_main, tiny_train_args

    def full(path, flags, perms=0o644):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(rundir, "open_fd", full)
    with pytest.raises(ValueError, match=r"cannot be written \(No space left on device\)"):
        RunLock(tmp_path / "run")
    argv = ["train", "cartpole", *tiny_train_args(4), "--run-dir", str(tmp_path / "run")]
    code, _, err = run_main([*argv, "--resume", "auto"], capsys)
    assert code == 2 and "cannot be written (No space left on device)" in err
    assert "Traceback" not in err


@pytest.mark.long  # one 2-rank run: ~15 s on 2 cores
@pytest.mark.timeout(180)
def test_two_launches_racing_for_one_new_run_dir_start_the_ranks_of_one(tmp_path):
    """Two `--nproc 2` launches started together at one new run directory: both launchers
    passed the lock check before either run's rank 0 took the lock, and both started their
    ranks; the loser's rank 0 then failed (109 lines, 4 tracebacks). The launcher takes the
    lock before it starts torchrun: the loser is refused in one line naming the winner's pid,
    and starts no rank."""
    run, marks = tmp_path / "run", tmp_path / "marks"
    marks.mkdir()
    cmd = [sys.executable, "-m", "distrl.cli", "train", "--import", "tests.fixtures.rank_marks"]
    cmd += ["cartpole", "--nproc", "2", "--run-dir", str(run)]
    cmd += tiny_train_args(8, max_iterations=4)
    procs = {
        name: subprocess.Popen(
            cmd,
            env=cli_env(DISTRL_TEST_RANK_MARKS=str(marks), DISTRL_TEST_LAUNCH=name),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        for name in ("a", "b")
    }
    out: dict[str, tuple[int, str, str]] = {}
    try:
        for name, p in procs.items():
            stdout, stderr = p.communicate(timeout=150)
            out[name] = (p.returncode, stdout, stderr)
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    codes = sorted(code for code, _, _ in out.values())
    assert codes == [0, 2], out
    winner = next(n for n, (code, _, _) in out.items() if code == 0)
    loser = next(n for n in out if n != winner)
    _, stdout, stderr = out[loser]
    lines = (stdout + stderr).strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stdout + stderr
    assert f"run dir {run} is in use by a live run (pid {procs[winner].pid} on " in lines[0]
    started = sorted(m.name.split(".")[0] for m in marks.iterdir())
    assert started == [winner, winner], started  # the loser started no rank
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["iteration"] == 4
