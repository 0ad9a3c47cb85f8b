"""`distrl train <task> --nproc N`: start torchrun for the user on this machine.

Everything listens on loopback only (127.0.0.1): this process hosts torchrun's c10d rendezvous
store on a socket it bound to 127.0.0.1 (torch's own TCPStore server would listen on every
interface, whatever host it is given) and torchrun joins it as a client (``is_host=false``);
rank 0 hosts the workers' store the same way (``loopback_store``, called by
``distributed.context.init``), and Gloo and NCCL are pinned to the loopback interface. Nothing
listens on other interfaces unless the user runs torchrun themselves with multi-node flags. With
``--max-restarts R`` torchrun restarts every rank when one dies; the training command then
resumes from the newest valid checkpoint (``--resume auto`` in a fixed run directory).

The ranks get ``OMP_NUM_THREADS`` = cores // N (at least 1) unless the user set it: each rank's
share of the machine, as its intra-op thread count is by default. torchrun would otherwise set
it to 1 and print a banner about it to every newcomer.

Signals (``distrl.interrupts.supervise``): torchrun runs in a session of its own; the launcher's
SIGINT (Ctrl-C), SIGTERM and SIGHUP go to the ranks, which stop at an agreed iteration boundary
and save; a second one, or ``--stop-timeout`` seconds, kills the tree. torchrun is started as
``python -m distrl.distributed.launch`` (``main``), so that a signal sent to torchrun itself
ends in its exit code rather than its traceback.

Start-up: when the command line asks for ``--nproc N`` the command starts torchrun's process
before its own imports (``early_torchrun.py``), and ``launch`` sends it its arguments.
"""

from __future__ import annotations

import datetime
import ipaddress
import math
import os
import signal
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from distrl import interrupts, openmp
from distrl.distributed import early_torchrun
from distrl.distributed.early_torchrun import under_torchrun as under_torchrun  # (its callers)

# Flags that belong to the launcher and must not reach the ranks (which would relaunch).
_LAUNCH_FLAGS = (
    "--nproc", "--max-restarts", "--max_restarts", "--nnodes", "--node-rank", "--node_rank",
    "--master-addr", "--master_addr", "--master-port", "--master_port",
)  # fmt: skip


@dataclass(frozen=True)
class Nodes:
    """The machines of a launch: how many, which one this is, and where node 0 hosts the run's
    store (``--nnodes``, ``--node-rank``, ``--master-addr``, ``--master-port``). One node: a
    free loopback port."""

    count: int = 1
    rank: int = 0
    addr: str = "127.0.0.1"
    port: int = 0

    @classmethod
    def of(cls, cfg: Any) -> Nodes:
        if cfg.nnodes == 1:
            return cls()
        return cls(cfg.nnodes, cfg.node_rank, cfg.master_addr, cfg.master_port)


ONE_NODE = Nodes()


def strip_launch_flags(argv: list[str]) -> list[str]:
    return strip_flags(argv, _LAUNCH_FLAGS)


def strip_flags(argv: list[str], names: Sequence[str]) -> list[str]:
    """``argv`` without the flags ``names`` and their values (``--f v`` or ``--f=v``)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        name = a.split("=", 1)[0]
        if name in names:
            skip = "=" not in a
            continue
        out.append(a)
    return out


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def loopback_listener(port: int = 0, host: str = "127.0.0.1") -> socket.socket:
    """A TCP socket bound to ``host``:``port`` (0: a free port) and listening, for a TCPStore
    server to take over through ``master_listen_fd``: torch's TCPStore binds every interface
    when it opens its own socket."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(socket.SOMAXCONN)
    except OSError:
        sock.close()
        raise
    return sock


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def rendezvous_store(timeout: float = 60.0, host: str = "127.0.0.1", port: int = 0) -> Any:
    """The c10d rendezvous store torchrun joins, hosted in this process on a socket bound to
    ``host`` only (loopback unless a multi-node launch names node 0's address)."""
    import torch.distributed as dist

    sock = loopback_listener(port, host)
    port = sock.getsockname()[1]
    # The store owns the descriptor from here on (it closes it when it is destroyed).
    return dist.TCPStore(
        host,
        port,
        is_master=True,
        multi_tenant=True,
        wait_for_workers=False,
        timeout=datetime.timedelta(seconds=timeout),
        master_listen_fd=sock.detach(),
    )


def loopback_store(rank: int, world_size: int, timeout: datetime.timedelta) -> Any:
    """The workers' store (what ``init_process_group``'s ``env://`` would give every rank) with
    rank 0's server listening on loopback only, when torchrun's ``MASTER_ADDR`` is a loopback
    address and the ranks do not use the agent's store; None otherwise (multi-machine runs,
    where ``env://`` creates the store and rank 0's listens on every interface: see
    docs/reliability.md). Every rank takes the same path, so all see the same keys."""
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if not addr or not port or not is_loopback(addr):
        return None
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        return None
    import torch.distributed as dist

    host = "127.0.0.1" if addr == "localhost" else addr
    listen_fd = loopback_listener(int(port), host).detach() if rank == 0 else None
    store = dist.TCPStore(
        host,
        int(port),
        world_size=world_size,
        is_master=rank == 0,
        timeout=timeout,
        multi_tenant=True,
        master_listen_fd=listen_fd,
    )
    return dist.PrefixStore("default_pg", store)  # the prefix env:// gives the default group


def loopback_interface() -> str:
    """The loopback interface's name (``lo`` on Linux, ``lo0`` on macOS)."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        names = []
    return next((n for n in ("lo", "lo0") if n in names), "lo")


def torchrun_command(
    nproc: int,
    max_restarts: int,
    script_args: list[str],
    port: int | None = None,
    stop_timeout: float = 300.0,
) -> list[str]:
    """torchrun joining the rendezvous store at 127.0.0.1:``port``, hosted by the caller
    (``rendezvous_store``), as a client; without ``port``, torchrun hosts the store itself on a
    free port, and torch's server then listens on every interface (``launch`` never does
    that). ``stop_timeout``: how long torchrun lets its workers stop on a signal it receives
    before it SIGKILLs them (its own default, 30 s, may be shorter than an iteration and a
    save)."""
    hosted = port is not None
    port = port if port is not None else free_port()
    return [
        sys.executable,
        "-m",
        "distrl.distributed.launch",  # torchrun, without its traceback on a signal (main)
        f"--nproc-per-node={nproc}",
        "--nnodes=1",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{port}",
        *(["--rdzv-conf=is_host=false"] if hosted else []),
        "--local-addr=127.0.0.1",
        f"--max-restarts={max_restarts}",
        "--monitor-interval=0.1",  # (its poll of the ranks: their exit seen within 0.1 s)
        f"--shutdown-timeout={max(1, math.ceil(stop_timeout))}",
        "-m",
        "distrl.cli",
        *script_args,
    ]


RANK_MEMORY = 280 * 2**20
"""Resident memory of one rank of a small run (measured 2026-11-28: 268-275 MiB for each rank of
`distrl train cartpole --nproc 2`, shared library pages included): ``check_memory`` counts this
per rank, and ``LAUNCH_MEMORY`` for the command and the launcher (221 and 231 MiB there)."""
LAUNCH_MEMORY = 450 * 2**20


def available_memory() -> int | None:
    """Bytes this machine can still give (Linux's MemAvailable); None where it does not say."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_memory(nproc: int) -> None:
    """Refuse ``--nproc N`` whose ranks could not all start on this machine's free memory."""
    free = available_memory()
    need = nproc * RANK_MEMORY + LAUNCH_MEMORY
    if free is not None and need > free:
        fits = max(1, (free - LAUNCH_MEMORY) // RANK_MEMORY)
        raise ValueError(
            f"--nproc {nproc} starts {nproc} ranks of about {RANK_MEMORY / 2**20:.0f} MiB "
            f"each and a launcher ({need / 2**30:.1f} GiB) before their envs grow, and this "
            f"machine has {free / 2**30:.1f} GiB free; use --nproc {fits} or fewer"
        )


def default_threads(local_world_size: int) -> int:
    """Cores / local world size: oversubscribing the cores makes every rank slower."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, (cores or 1) // max(1, local_world_size))


def launch_env(nproc: int, one_machine: bool = True) -> dict[str, str]:
    """The environment torchrun and its ``nproc`` ranks start with: this process's, plus
    defaults for what the user did not set (and, for a run on several machines, the
    ``GLOO_SOCKET_IFNAME`` the user set for them, or Gloo's own choice: the hostname's
    address)."""
    env = dict(os.environ)
    # Torch 2.13's elastic restart with Gloo fails to reconnect when the agent shares its
    # rendezvous TCP store with the workers; an unshared store restarts cleanly.
    env.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    env.setdefault("PYTHONUNBUFFERED", "1")
    # One machine: the ranks' Gloo and NCCL sockets on loopback, whatever the shell set for
    # multi-machine work.
    if one_machine:
        env["GLOO_SOCKET_IFNAME"] = env["NCCL_SOCKET_IFNAME"] = loopback_interface()
    # Set, torchrun leaves it alone (no "Setting OMP_NUM_THREADS" banner); cores // nproc is
    # each rank's share, the same as its default intra-op threads.
    env.setdefault("OMP_NUM_THREADS", str(default_threads(nproc)))
    openmp.set_defaults(env)  # the ranks' idle OpenMP threads sleep (distrl/openmp.py)
    return env


def launch(
    nproc: int,
    max_restarts: int,
    script_args: list[str],
    stop_timeout: float = 300.0,
    run_dir: str = "",
    modules: Sequence[str] = (),
    nodes: Nodes = ONE_NODE,
) -> int:
    """Run the ranks under torchrun, with its rendezvous store hosted here on loopback; return
    torchrun's exit code, or 128 + the signal after Ctrl-C or SIGTERM, which this process
    passes on to the ranks (``interrupts.supervise``: they stop at an iteration boundary and
    save; ``run_dir`` and ``modules`` (the ``--import`` modules) name the resume command).
    One node only (``nodes``: multi-node runs start torchrun on each machine themselves)."""
    if nodes.count != 1:
        raise ValueError("distrl's torchrun launcher starts one node; see docs/training.md")
    store = rendezvous_store()
    cmd = torchrun_command(nproc, max_restarts, script_args, store.port, stop_timeout)
    env = launch_env(nproc)
    warm = early_torchrun.take()  # (a launch that failed before leaves it to cli's discard)
    try:
        start = warm.go if warm is not None else None
        return interrupts.supervise(cmd, env, stop_timeout, run_dir, modules, start)
    finally:
        del store


def main() -> int:
    """torchrun (``torch.distributed.run``) as the launcher starts it: when torchrun itself is
    sent SIGINT or SIGTERM it passes the signal on to its workers, which stop at an iteration
    boundary and save (``distrl.interrupts``), and then raises; here that ends in the exit code
    of the signal instead of its traceback."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.run import main as torchrun

    if sys.argv[1:2] == ["--warm"] and not early_torchrun.wait_for_go(int(sys.argv[2])):
        return 0  # started early, and the command went on without it
    try:
        torchrun()
    except SignalException as e:
        return interrupts.exit_code(signal.Signals(e.sigval).name)
    return 0


if __name__ == "__main__":
    # Out without the interpreter's teardown (1.2 s with torch loaded on the 2-core VM, after
    # the ranks are gone): torchrun registers no exit handler and holds no file of the run.
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
