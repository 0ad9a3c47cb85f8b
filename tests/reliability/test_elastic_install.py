"""Under ``--dist.strategy elastic`` a replacement runs the members' install, as every rank
does at the start (``Collectives.check_install``), which a replacement skips (it takes its
state from a peer instead of setting up with the others): the leader compares the install the
newcomer wrote into the store with its own before it admits it, and one that differs (an
install upgraded in place under a live run, another machine's) is refused by name and left
out; the run goes on."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from distrl.distributed import membership
from distrl.distributed.membership import Member, Membership
from distrl.distributed.transport import install_difference, install_identity
from tests.distributed.workers import cli_env
from tests.helpers import tiny_train_args


class DictStore:
    """The few TCPStore calls ``Membership.install_refused`` makes, on a dict."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def set(self, key: str, value: str) -> None:
        self.data[key] = value.encode()

    def get(self, key: str) -> bytes:
        return self.data[key]

    def check(self, keys: list[str]) -> bool:
        return all(k in self.data for k in keys)


def test_install_difference_names_each_field_that_differs():
    ours = install_identity()
    assert install_difference(ours, dict(ours)) is None
    other = dict(ours, **{"distrl version": "9.9.9"})
    assert install_difference(ours, other) == f"distrl version 9.9.9, not {ours['distrl version']}"
    layout = dict(ours, **{"message layout": {"WorkerHeader": ["kind"]}})
    assert install_difference(ours, layout) == "message layout differs"
    assert "torch version unknown" in str(install_difference(ours, {}))  # an older distrl's


def test_a_replacement_with_another_install_is_refused_by_name(monkeypatch):
    monkeypatch.setenv(membership.ID_ENV, "1")
    store = DictStore()
    leader = Membership(store, 0, 2, 5.0, "gloo")
    same, other = Member(1, 7, 4242), Member(1, 8, 4343)
    store.set("el/install/7", json.dumps(install_identity()))
    store.set("el/install/8", json.dumps(dict(install_identity(), **{"torch version": "1.0"})))
    assert not leader.install_refused(same) and not leader.refused
    assert leader.install_refused(other)
    assert "torch version 1.0, not" in store.get(f"el/refused/{other}").decode()
    (line,) = leader.refused
    assert line.startswith("slot 1 (pid 4343) not admitted as a replacement: its install ")
    assert leader.install_refused(other) and len(leader.refused) == 1  # said once


@pytest.mark.slow
@pytest.mark.long  # a 2-rank elastic run that loses a rank: ~25 s on 2 cores
@pytest.mark.timeout(150)
def test_a_replacement_running_another_install_is_refused_and_the_run_goes_on(tmp_path: Path):
    """Slot 1 killed at iteration 4; its replacement runs distrl 0.0.0+other: it is refused
    in one line, joins nothing, and slot 0 finishes the run alone (before the fix it joined
    and took the members' state)."""
    cmd = [sys.executable, "-m", "distrl.cli", "train", "--import", "tests.fixtures.elastic_faults"]
    cmd += ["elastic-faults-cartpole", "--nproc", "2", "--dist.strategy", "elastic"]
    cmd += ["--max-restarts", "1", "--dist.timeout", "5", "--run-dir", str(tmp_path / "run")]
    cmd += tiny_train_args(8, max_iterations=30)
    env = cli_env(
        DISTRL_TEST_FAULTS="1:4:KILL",
        DISTRL_TEST_REPLACEMENT_VERSION="0.0.0+other",
        DISTRL_TEST_SHORT_HANDED_DELAY="0.4",  # time for the replacement to ask before the end
    )
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 0, out[-4000:]
    said = re.findall(
        r"error: slot 1 \(pid (\d+)\): not admitted to the run: its install differs from the "
        r"members' \(distrl version 0\.0\.0\+other, not [^)]+\); install the same distrl",
        out,
    )
    assert len(said) == 1, out[-4000:]
    assert f"slot 1 (pid {said[0]}) not admitted as a replacement" in out, out[-4000:]
    assert "Traceback" not in out, out[-4000:]
    text = (tmp_path / "run" / "metrics.jsonl").read_text()
    recs = [json.loads(x) for x in text.splitlines()]
    assert recs[-1]["iteration"] == 30
    members = [r["dist/members"] for r in recs]
    assert members[:3] == [2] * 3 and set(members[5:]) == {1}, members
    assert "rank(s) joined" not in out, out[-3000:]
    assert recs[-1]["dist/joins"] == 0
