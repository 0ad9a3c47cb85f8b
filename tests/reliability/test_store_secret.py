"""A value distrl's ranks act on in their store counts only when it carries the run's secret.

torch's TCPStore has no authentication: any process on the machine could connect to rank 0's
store on 127.0.0.1, list its keys and write ``.../distrl/dropped/1``; rank 1 then left
"dropped", rank 0's next collective failed, and the run ended without its checkpoint. The
launcher now makes a token per run, hands it to the ranks in their environment and writes it
0600 into the run directory; the ranks sign the values they write with it and read no other
(``distributed/store_secret.py``)."""

from __future__ import annotations

import datetime
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from distrl.distributed import launch, store_secret
from tests.distributed.workers import cli_env
from tests.fixtures import pause
from tests.helpers import tiny_train_args


def test_a_value_written_without_the_secret_is_not_read(monkeypatch):
    monkeypatch.setenv(store_secret.SECRET_ENV, "f00d")
    raw = launch.rendezvous_store(timeout=10)
    guarded = store_secret.guard(raw)
    raw.set("distrl/dropped/1", "a foreign process said so")
    assert not guarded.check(["distrl/dropped/1"])
    with pytest.raises(KeyError, match="not signed with the run's secret"):
        guarded.get("distrl/dropped/1")
    guarded.set("distrl/alive/1", "3 0.0")
    assert guarded.check(["distrl/alive/1"]) and guarded.get("distrl/alive/1") == b"3 0.0"
    assert raw.get("distrl/alive/1").endswith(b" 3 0.0")  # readable, not forgeable
    raw.set("distrl/dropped/1", raw.get("distrl/alive/1"))  # a signed value moved elsewhere
    assert not guarded.check(["distrl/dropped/1"])
    assert store_secret.guard(raw).get("distrl/alive/1") == b"3 0.0"  # another process
    monkeypatch.setenv(store_secret.SECRET_ENV, "beef")
    assert not store_secret.guard(raw).check(["distrl/alive/1"])  # another run's secret
    monkeypatch.delenv(store_secret.SECRET_ENV)
    assert store_secret.guard(raw) is raw  # no secret (torchrun started by the user): as is


def test_the_secret_file_is_readable_by_its_user_only(tmp_path: Path):
    old = tmp_path / store_secret.SECRET_FILE
    old.write_text("left by an earlier run\n")
    old.chmod(0o644)
    token = store_secret.new()
    path = store_secret.write(tmp_path, token)
    assert path.read_text() == f"{token}\n" and len(token) == 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    store_secret.remove(path)
    assert not path.exists()


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(x.decode().split("=", 1) for x in raw if b"=" in x)


@pytest.mark.long  # a 2-rank launch: ~15 s on 2 cores (the unit cases stay in make test)
@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
@pytest.mark.timeout(150)
def test_a_foreign_client_of_the_live_runs_store_cannot_drop_a_rank(tmp_path: Path):
    """While rank 0 holds in iteration 3 (the pause fixture), a foreign client connects to its
    store, finds rank 1's keys and writes the one that told rank 1 it was dropped: the run
    finishes normally."""
    run, marker = tmp_path / "run", tmp_path / "paused"
    cmd = [sys.executable, "-m", "distrl.cli", "train", "cartpole", "--nproc", "2"]
    cmd += ["--run-dir", str(run), "--dist.timeout", "30", *tiny_train_args(8, max_iterations=8)]
    env = cli_env(
        DISTRL_TEST_PAUSE_AT_ITERATION="3",
        DISTRL_TEST_PAUSE_MARKER=str(marker),
        DISTRL_TEST_PAUSE_HOLD="2",
    )
    proc = subprocess.Popen(
        pause.command(cmd), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while not marker.exists() or not marker.read_text().endswith("\n"):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
            time.sleep(0.05)
        rank0 = _environ(int(marker.read_text()))
        assert len(rank0[store_secret.SECRET_ENV]) == 32  # the ranks have the run's secret
        assert (run / store_secret.SECRET_FILE).read_text() == rank0[store_secret.SECRET_ENV] + "\n"
        import torch.distributed as dist

        foreign = dist.TCPStore(
            "127.0.0.1", int(rank0["MASTER_PORT"]), is_master=False,
            timeout=datetime.timedelta(seconds=10),
        )  # fmt: skip
        # any client can list the keys, so a secret prefix would not hide them
        (alive,) = [k for k in foreign.list_keys() if k.endswith("distrl/alive/1")]
        foreign.set(alive.replace("alive", "dropped"), "a foreign process said so")
        out, _ = proc.communicate(timeout=100)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 0, out[-4000:]
    assert "dropped" not in out and "Traceback" not in out, out[-4000:]
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["iteration"] == 8
    assert (run / "checkpoints" / "ckpt_00000008.pt").exists()
    assert not (run / store_secret.SECRET_FILE).exists()  # removed at the end
