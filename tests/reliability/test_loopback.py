"""`distrl train --nproc 2` listens on loopback only.

A live 2-rank run under the real launcher: every listening TCP socket of its process tree (the
launcher, which hosts torchrun's rendezvous store; torchrun; rank 0's worker store; each rank's
Gloo listener) is read from /proc (the socket inodes of each process's descriptors matched
against /proc/<pid>/net/tcp and tcp6) while the ranks train, and none is off 127.0.0.1. Torch's
TCPStore server, left to open its own socket, listens on every interface (``::``) whatever host
it is given; the stores are handed a socket bound to 127.0.0.1 instead.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import BIN, tiny_train_args

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")


def process_tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def socket_inodes(pid: int) -> set[str]:
    out = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return out
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(target[len("socket:[") : -1])
    return out


def decode(hex_addr: str, family: socket.AddressFamily) -> str:
    raw = bytes.fromhex(hex_addr)
    # /proc prints each 32-bit word in host (little-endian) order
    raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return socket.inet_ntop(family, raw)


def listening(pid: int) -> set[tuple[int, str, int]]:
    """(pid, address, port) of each TCP socket ``pid`` has open in the LISTEN state."""
    mine, out = socket_inodes(pid), set()
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] != "0A" or fields[9] not in mine:  # 0A: TCP_LISTEN
                continue
            addr, port = fields[1].split(":")
            out.add((pid, decode(addr, family), int(port, 16)))
    return out


@pytest.mark.slow  # a 2-rank launch: ~10 s
@pytest.mark.timeout(150)
def test_every_listening_socket_of_a_two_rank_run_is_on_loopback(tmp_path):
    run_dir = tmp_path / "run"
    cmd = [str(BIN / "distrl"), "train", "cartpole", "--nproc", "2", "--run-dir", str(run_dir)]
    cmd += [*tiny_train_args(8, max_iterations=2000), "--dist.timeout", "30"]
    log = tmp_path / "log"
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    seen: set[tuple[int, str, int]] = set()
    owners: dict[int, str] = {}
    try:
        deadline = time.monotonic() + 120
        trained = 0
        while time.monotonic() < deadline and proc.poll() is None:
            for pid in process_tree(proc.pid):
                found = listening(pid)
                if found:
                    seen |= found
                    with contextlib.suppress(OSError):
                        owners[pid] = Path(f"/proc/{pid}/cmdline").read_bytes()[:120].decode()
            metrics = run_dir / "metrics.jsonl"
            if metrics.exists() and metrics.read_text().count("\n") >= 2:
                trained += 1  # two iterations done: stores and Gloo are up; look a bit longer
                if trained >= 5:
                    break
            time.sleep(0.2)
        assert proc.poll() is None and trained, log.read_text()[-3000:]
    finally:
        # torchrun starts its ranks in sessions of their own: kill every process of the tree
        # (a killed launcher's ranks trained on for hours, loading the machine)
        for pid in process_tree(proc.pid):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        proc.wait()
    described = "\n".join(f"{a}:{p} in {pid} ({owners.get(pid)})" for pid, a, p in sorted(seen))
    # the launcher's rendezvous store, rank 0's worker store, and a Gloo listener per rank
    assert len(seen) >= 4, described
    assert len({pid for pid, _, _ in seen}) >= 3, described
    off = [(pid, a, p) for pid, a, p in seen if a != "127.0.0.1"]
    assert not off, f"listening off loopback: {off}\nall:\n{described}"
