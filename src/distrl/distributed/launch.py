"""`distrl train <task> --nproc N`: start torchrun for the user on this machine.

Standalone c10d rendezvous bound to loopback (127.0.0.1, a free port): nothing listens on other
interfaces unless the user runs torchrun themselves with explicit multi-node flags. With
``--max-restarts R`` torchrun restarts every rank when one dies; the training command then
resumes from the newest valid checkpoint (``--resume auto`` in a fixed run directory).

The ranks get ``OMP_NUM_THREADS`` = cores // N (at least 1) unless the user set it: each rank's
share of the machine, as its intra-op thread count is by default. torchrun would otherwise set
it to 1 and print a banner about it to every newcomer.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

# Flags that belong to the launcher and must not reach the ranks (which would relaunch).
_LAUNCH_FLAGS = ("--nproc", "--max-restarts", "--max_restarts")


def strip_launch_flags(argv: list[str]) -> list[str]:
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        name = a.split("=", 1)[0]
        if name in _LAUNCH_FLAGS:
            skip = "=" not in a
            continue
        out.append(a)
    return out


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def under_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ or "LOCAL_RANK" in os.environ


def torchrun_command(nproc: int, max_restarts: int, script_args: list[str]) -> list[str]:
    port = free_port()
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={nproc}",
        "--nnodes=1",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{port}",
        "--local-addr=127.0.0.1",
        f"--max-restarts={max_restarts}",
        "--monitor-interval=0.5",
        "-m",
        "distrl.cli",
        *script_args,
    ]


def launch_env(nproc: int) -> dict[str, str]:
    """The environment torchrun and its ``nproc`` ranks start with: this process's, plus
    defaults for what the user did not set."""
    from distrl.distributed.context import default_threads

    env = dict(os.environ)
    # Torch 2.13's elastic restart with Gloo fails to reconnect when the agent shares its
    # rendezvous TCP store with the workers; an unshared store restarts cleanly.
    env.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    env.setdefault("PYTHONUNBUFFERED", "1")
    # Set, torchrun leaves it alone (no "Setting OMP_NUM_THREADS" banner); cores // nproc is
    # each rank's share, the same as its default intra-op threads.
    env.setdefault("OMP_NUM_THREADS", str(default_threads(nproc)))
    return env


def launch(nproc: int, max_restarts: int, script_args: list[str]) -> int:
    """Run the ranks under torchrun; return its exit code."""
    cmd = torchrun_command(nproc, max_restarts, script_args)
    return subprocess.call(cmd, env=launch_env(nproc))
