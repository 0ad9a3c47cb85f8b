"""Many machines on one host: a testbed of network namespaces, for tests/cluster and `distrl bench
cluster` (benchmarks/cluster.py), both run from a checkout.

``Testbed(nodes=N, rate_mbit=R)`` makes N network namespaces, each a "node"
with its own address (10.231.0.(101 + i)/24 on its ``eth0``) and loopback, joined by a bridge
that lives in one more namespace (the "switch"), so nothing is added to the host's own
interfaces:

    node i: eth0 (10.231.0.101+i) ==veth== p<i> ──┐
                                                   br0   (in the switch namespace)
    node j: eth0 (10.231.0.101+j) ==veth== p<j> ──┘

The addresses all have three digits in their last part, so torchrun's c10d rendezvous, which
numbers the nodes by sorting their addresses as strings, gives node i the group rank i (its
processes the global ranks i * nproc ..): which rank runs where is known before the start.

Each node's link is rate-limited with a ``tbf`` qdisc on both ends of its veth: on ``eth0``
(what the node sends) and on ``p<i>`` in the switch (what the node receives). ``netem`` (delay,
loss) is missing from the kernels this was built on, so only the rate is emulated; the
namespaces share the host's CPU cores and memory bus.

A command runs on node i as ``ip netns exec NODE cmd`` (``Testbed.popen``); ``Testbed.torchrun``
gives the multi-node torchrun command of a node, with the two things a namespace needs beyond
the documented recipe: ``--local-addr`` (the node's address, else the agent advertises the
shared hostname's address as MASTER_ADDR) and ``--rdzv-conf is_host=...`` (torchrun decides who
hosts the rendezvous store by matching the endpoint against the hostname, which every namespace
shares). ``GLOO_SOCKET_IFNAME=eth0`` makes Gloo use the node's link. ``--node-rank`` is only
read by the static rendezvous; c10d ignores it (and says so in a warning).

Everything is removed on exit, on an error and on Ctrl-C or SIGTERM (processes first, then the
namespaces; a veth dies with its namespace). Names start with ``{prefix}-{pid}-``; ``sweep``
removes what a killed process (its pid gone) left behind, and runs before every new testbed.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SUBNET = "10.231.0"
"""The nodes' /24 (only inside the testbed's namespaces: the host never routes to it)."""
FIRST_HOST = 101
"""Node i has the address ``{SUBNET}.{FIRST_HOST + i}`` (three digits: see the module doc)."""
MAX_NODES = 255 - FIRST_HOST
IFNAME = "eth0"
"""Every node's interface name (the switch side of node i's veth is ``p<i>``)."""
_counter = itertools.count()


def missing() -> str | None:
    """Why a testbed cannot be made here (for a test's skip), or None when it can."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "network namespaces need root (run as root, or in CI)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"`{tool}` (iproute2) not found on PATH"
    name = f"dtrl-{os.getpid()}-probe"  # named so that `sweep` finds it if we are killed
    probe = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"`ip netns add` failed: {probe.stderr.strip()}"
    try:
        for args in (
            ["ip", "-n", name, "link", "add", "v0", "type", "veth", "peer", "name", "v1"],
            ["ip", "-n", name, "link", "add", "b0", "type", "bridge"],
            ["tc", "-n", name, "qdisc", "add", "dev", "v0", "root", "tbf", "rate", "100mbit"]
            + ["burst", "64kb", "latency", "50ms"],
        ):
            r = subprocess.run(args, capture_output=True, text=True)
            if r.returncode != 0:
                return f"`{' '.join(args)}` failed: {r.stderr.strip()}"
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


def _sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(list(args), capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"`{' '.join(args)}` failed ({r.returncode}): {r.stderr.strip()}")
    return r


def _netns_list() -> list[str]:
    out = _sh("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_netns_pids(ns: str) -> None:
    """SIGKILL every process in namespace ``ns`` (whatever started it)."""
    for _ in range(3):
        pids = [int(p) for p in _sh("ip", "netns", "pids", ns, check=False).stdout.split()]
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


def sweep(prefix: str = "dtrl") -> list[str]:
    """Remove the namespaces (and their processes) of testbeds named ``{prefix}-{pid}-...``
    whose creating process is gone; returns their names."""
    removed = []
    for ns in _netns_list():
        parts = ns.split("-")
        if parts[0] != prefix or len(parts) < 3 or not parts[1].isdigit():
            continue
        if _pid_alive(int(parts[1])):
            continue
        _kill_netns_pids(ns)
        _sh("ip", "netns", "del", ns, check=False)
        removed.append(ns)
    return removed


@dataclass(frozen=True)
class Node:
    """One node of a testbed: its index, namespace, address and interface."""

    index: int
    netns: str
    ip: str
    ifname: str = IFNAME
    switch_port: str = ""
    """The switch side of this node's veth (``p<i>`` in the switch namespace)."""


class Testbed:
    """N nodes in network namespaces on one bridge, each link shaped by ``tc tbf``.

    >>> with Testbed(nodes=2, rate_mbit=300) as tb:           # doctest: +SKIP
    ...     p = tb.popen(tb.nodes[1], ["python", "-c", "print(1)"])
    """

    __test__ = False  # not a pytest test class, despite its name

    def __init__(
        self,
        nodes: int = 2,
        rate_mbit: float | None = None,
        prefix: str = "dtrl",
        pin_cores: bool = True,
    ):
        if nodes < 1 or nodes > MAX_NODES:
            raise ValueError(f"nodes must be 1..{MAX_NODES}, got {nodes}")
        if "-" in prefix or not prefix:
            raise ValueError(f"prefix must be non-empty without '-', got {prefix!r}")
        self.prefix = prefix
        self.tag = f"{prefix}-{os.getpid()}-{next(_counter)}"
        self.switch = f"{self.tag}-sw"
        self.nodes = [
            Node(i, f"{self.tag}-n{i}", f"{SUBNET}.{FIRST_HOST + i}", switch_port=f"p{i}")
            for i in range(nodes)
        ]
        self.rate_mbit = rate_mbit
        self.pin_cores = pin_cores
        """Run each node's processes on its share of the cores (``cpus``)."""
        self._procs: list[subprocess.Popen] = []
        self._old_term: Any = None

    # ---- life ------------------------------------------------------------------------------
    def __enter__(self) -> Testbed:
        self._catch_sigterm()
        try:
            self.create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def create(self) -> None:
        why = missing()
        if why:
            raise RuntimeError(f"cannot build a namespace testbed: {why}")
        sweep(self.prefix)
        sw = self.switch
        _sh("ip", "netns", "add", sw)
        _sh("ip", "-n", sw, "link", "set", "lo", "up")
        _sh("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
        _sh("ip", "-n", sw, "link", "set", "br0", "up")
        for n in self.nodes:
            _sh("ip", "netns", "add", n.netns)
            _sh("ip", "-n", n.netns, "link", "set", "lo", "up")
            # both ends made in the switch, then one moved into the node and renamed there
            _sh("ip", "-n", sw, "link", "add", n.switch_port, "type", "veth", "peer", "name", "x")
            _sh("ip", "-n", sw, "link", "set", "x", "netns", n.netns)
            _sh("ip", "-n", n.netns, "link", "set", "x", "name", n.ifname)
            _sh("ip", "-n", n.netns, "addr", "add", f"{n.ip}/24", "dev", n.ifname)
            _sh("ip", "-n", n.netns, "link", "set", n.ifname, "up")
            _sh("ip", "-n", sw, "link", "set", n.switch_port, "master", "br0")
            _sh("ip", "-n", sw, "link", "set", n.switch_port, "up")
        self.set_rate(self.rate_mbit)

    def close(self) -> None:
        """Kill every process started here and in the namespaces, then delete the namespaces
        (safe to call twice; runs on every way out of the ``with``)."""
        for p in self._procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(p.pid, signal.SIGKILL)
        for p in self._procs:
            with contextlib.suppress(Exception):
                p.wait(5)
        for ns in [n.netns for n in self.nodes] + [self.switch]:
            if ns in _netns_list():
                _kill_netns_pids(ns)
                _sh("ip", "netns", "del", ns, check=False)
        self._restore_sigterm()

    def _catch_sigterm(self) -> None:
        """SIGTERM becomes SystemExit (so ``__exit__`` runs) when nobody else handles it."""
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:

            def term(signum, frame):
                raise SystemExit(128 + signum)

            self._old_term = signal.signal(signal.SIGTERM, term)

    def _restore_sigterm(self) -> None:
        if self._old_term is not None:
            signal.signal(signal.SIGTERM, self._old_term)
            self._old_term = None

    # ---- links -----------------------------------------------------------------------------
    def set_rate(self, mbit: float | None, nodes: Sequence[Node] | None = None) -> None:
        """Shape ``nodes``' links (default all) to ``mbit`` Mbit/s each way; None: unshaped."""
        for n in nodes if nodes is not None else self.nodes:
            for ns, dev in ((n.netns, n.ifname), (self.switch, n.switch_port)):
                if mbit is None:
                    _sh("tc", "-n", ns, "qdisc", "del", "dev", dev, "root", check=False)
                else:
                    _sh("tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", *tbf_args(mbit))

    def set_link(self, node: Node, up: bool) -> None:
        """Cut (or restore) ``node``'s link at the switch: its packets go nowhere, silently
        (no reset reaches either end, as when a cable is pulled)."""
        _sh("ip", "-n", self.switch, "link", "set", node.switch_port, "up" if up else "down")

    def link_bytes(self, node: Node) -> int:
        """Bytes ``node`` has sent and received on its link so far: what crossed between
        machines (its ranks talk among themselves over loopback)."""
        stats = "/sys/class/net/{}/statistics/{}_bytes"
        total = 0
        for way in ("tx", "rx"):
            r = _sh("ip", "netns", "exec", node.netns, "cat", stats.format(node.ifname, way))
            total += int(r.stdout.strip())
        return total

    # ---- processes -------------------------------------------------------------------------
    def command(self, node: Node, cmd: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", node.netns, *cmd]

    def env(self, node: Node, base: dict[str, str] | None = None) -> dict[str, str]:
        """The environment of a process on ``node``: Gloo (and TensorPipe) on its interface,
        and this Python environment's scripts first on PATH (torchrun's ``--no-python`` finds
        ``train`` there even when the environment is not activated)."""
        env = dict(os.environ if base is None else base)
        env.update(GLOO_SOCKET_IFNAME=node.ifname, TP_SOCKET_IFNAME=node.ifname)
        scripts = str(Path(sys.executable).parent)
        if env.get("PATH", "").split(os.pathsep)[0] != scripts:
            env["PATH"] = scripts + os.pathsep + env.get("PATH", "")
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env

    def cpus(self, node: Node) -> list[int]:
        """The cores ``node``'s processes run on: an equal share of this process's cores per
        node, or one core each, round robin, when there are more nodes than cores. A node's
        ranks then see only their node's cores (distrl's default threads are cores / local
        world size), as on separate machines, instead of every node's intra-op threads
        competing for all of them."""
        cores = sorted(os.sched_getaffinity(0))
        share = len(cores) // len(self.nodes)
        if share == 0:
            return [cores[node.index % len(cores)]]
        return cores[node.index * share : (node.index + 1) * share]

    def popen(self, node: Node, cmd: Sequence[str], env: dict[str, str] | None = None, **kw):
        """Start ``cmd`` on ``node`` (on its cores with ``pin_cores``) in its own session
        (killed with its children on close)."""
        cpus = self.cpus(node)
        pin = (lambda: os.sched_setaffinity(0, cpus)) if self.pin_cores else None
        p = subprocess.Popen(
            self.command(node, cmd),
            env=self.env(node, env),
            start_new_session=True,
            preexec_fn=pin,
            **kw,
        )
        self._procs.append(p)
        return p

    def torchrun(
        self,
        node: Node,
        nproc: int,
        port: int,
        script: Sequence[str],
        max_restarts: int = 0,
        rdzv_conf: str = "",
    ) -> list[str]:
        """Node ``node``'s multi-node torchrun command (rendezvous on node 0 at ``port``);
        ``rdzv_conf``: more ``key=value,...`` for ``--rdzv-conf`` (e.g. ``keep_alive_interval=1``:
        the rendezvous lets a new round start once a dead node has missed
        ``keep_alive_max_attempt`` (3) heartbeats of that many seconds, 5 by default)."""
        torchrun = Path(sys.executable).parent / "torchrun"  # this environment's
        run = [sys.executable, "-m", "torch.distributed.run"]
        head = [str(torchrun)] if torchrun.exists() else run
        return [
            *head,
            f"--nnodes={len(self.nodes)}",
            f"--node-rank={node.index}",
            f"--nproc-per-node={nproc}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={self.nodes[0].ip}:{port}",
            f"--rdzv-conf=is_host={int(node.index == 0)}{',' if rdzv_conf else ''}{rdzv_conf}",
            f"--local-addr={node.ip}",
            f"--max-restarts={max_restarts}",
            "--monitor-interval=0.5",
            "--no-python",
            *script,
        ]

    def worker_envs(self, node: Node) -> list[dict[str, str]]:
        """The environments of the torchrun workers now running on ``node`` (processes with
        RANK and LOCAL_RANK set), in LOCAL_RANK order; [] before they start or after they end."""
        envs = []
        for pid in _sh("ip", "netns", "pids", node.netns, check=False).stdout.split():
            try:
                raw = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
            except OSError:  # gone in between
                continue
            env = dict(kv.split("=", 1) for kv in raw.split("\0") if "=" in kv)
            if "RANK" in env and "LOCAL_RANK" in env:
                envs.append(env)
        return sorted(envs, key=lambda e: int(e["LOCAL_RANK"]))


def tbf_args(mbit: float) -> list[str]:
    """A token bucket at ``mbit``: bucket of 2 ms at that rate (at least 64 KiB, a GSO packet),
    queue of 50 ms."""
    rate_bytes = mbit * 1e6 / 8
    burst = max(64 * 1024, int(rate_bytes * 0.002))
    return ["tbf", "rate", f"{mbit:g}mbit", "burst", str(burst), "latency", "50ms"]
