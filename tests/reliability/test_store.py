"""The rendezvous store never hangs a rank: with its host stopped (SIGSTOP), a read blocks past
the store's own timeout (measured: ``check`` did not return in 60 s with a 3 s timeout). Every
store operation of distrl waits at most ``STORE_WAIT`` seconds once, and then the store is not
used again, so heartbeats, drop checks and silence reports cost nothing more."""

from __future__ import annotations

import datetime
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d

from distrl.distributed import context, liveness
from tests.distributed.harness import free_port

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def stoppable_store(monkeypatch):
    """A TCPStore hosted by another process (pid, client), the client as the default store."""
    port = free_port()
    host = subprocess.Popen(
        [sys.executable, "-c", "import datetime, time, torch.distributed as d; "
         f"s = d.TCPStore('127.0.0.1', {port}, 2, True, timeout=datetime.timedelta(seconds=30)); "
         "time.sleep(120)"]
    )  # fmt: skip
    try:
        client = dist.TCPStore("127.0.0.1", port, 2, False, timeout=datetime.timedelta(seconds=20))
        monkeypatch.setattr(distributed_c10d, "_get_default_store", lambda: client)
        monkeypatch.setattr(liveness, "_store_down", False)
        monkeypatch.setattr(liveness, "STORE_WAIT", 1.0)
        yield host.pid, client
    finally:
        os.kill(host.pid, signal.SIGCONT)
        host.kill()
        host.wait()


def test_a_stopped_store_host_costs_one_wait_then_nothing(stoppable_store):
    pid, client = stoppable_store
    client.set("distrl/dropped/1", "stalled")
    assert liveness.dropped_reason(1) == "stalled"  # the store answers while its host runs
    os.kill(pid, signal.SIGSTOP)
    t0 = time.perf_counter()
    assert liveness.dropped_reason(1) is None
    first = time.perf_counter() - t0
    assert 0.9 <= first < 3.0, first  # one STORE_WAIT, not the store's own 20 s (or forever)
    t0 = time.perf_counter()
    ctx = context.DistContext(2, 2, 3, 3, torch.device("cpu"), "gloo")
    liveness.heartbeat(ctx, 7)
    liveness.mark_left(2)
    assert liveness.release_dropped({1: "stalled"}, wait=5.0) == []
    assert "stopped answering" in liveness.silent_ranks(ctx)
    assert time.perf_counter() - t0 < 0.5  # given up on: no more waits


def test_a_live_store_carries_heartbeats_and_drops(stoppable_store):
    _, client = stoppable_store
    ctx = context.DistContext(1, 1, 3, 3, torch.device("cpu"), "gloo")
    liveness.heartbeat(ctx, 3)
    assert client.get("distrl/alive/1").decode().split()[0] == "3"
    other = context.DistContext(2, 2, 3, 3, torch.device("cpu"), "gloo")
    assert "rank 1 last seen at iteration 3" in liveness.silent_ranks(other)
    client.set("distrl/dropped/1", "too slow")
    with pytest.raises(liveness.RankDropped, match="too slow"):
        liveness.heartbeat(ctx, 4)
    assert not liveness._store_down


CHILD = """
import sys, time
from distrl.distributed import liveness
from torch.distributed import distributed_c10d

def busy(store):  # 0.3 s of this process's CPU time: it does not pass while stopped
    t0 = time.process_time()
    while time.process_time() - t0 < 0.3:
        pass
    return "answered"

distributed_c10d._get_default_store = lambda: object()
liveness.STORE_WAIT = 1.0
print("start", flush=True)
print(liveness.store_op(busy), liveness._store_down, flush=True)
"""


def test_a_rank_stopped_mid_operation_does_not_take_the_stop_for_a_silent_store():
    """A stalled rank is stopped wherever it is, possibly inside a store operation; woken
    (release_dropped sends SIGCONT), it must still read the store, or it cannot learn that
    it was dropped and exits 1 instead of leaving quietly."""
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "start"
        time.sleep(0.1)
        os.kill(child.pid, signal.SIGSTOP)
        time.sleep(2.0)  # twice STORE_WAIT
        os.kill(child.pid, signal.SIGCONT)
        out, _ = child.communicate(timeout=30)
    finally:
        child.kill()
    assert out.strip() == "(True, 'answered') False", out
