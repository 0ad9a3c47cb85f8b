"""Start real Gloo ranks on loopback with a hard timeout: a hang is a failure, never a stuck CI."""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import queue
import socket
import time
import traceback
from collections.abc import Callable
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# What a forkserver imports once, so that each rank forks with torch and distrl loaded.
PRELOAD = [
    "torch",
    "torch.distributed",
    "distrl.cli",
    "distrl.distributed.strategies",
    "distrl.envs.registry",
    "distrl.runner.on_policy",
    "distrl.runner.episodic",
    "distrl.telemetry",
]


def _child(
    fn: Callable, rank: int, world: int, port: int, q: mp.Queue, args: tuple, env: dict
) -> None:
    # A forkserver was started with the environment of its first use: take the caller's now.
    os.environ.clear()
    os.environ.update(env)
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_WORLD_SIZE=str(world),
    )
    import torch

    torch.set_num_threads(1)
    code = 0
    try:
        # plain pickle bytes: tensors would otherwise travel as shared memory that vanishes
        # when this process exits
        q.put((rank, "ok", pickle.dumps(fn(rank, world, *args))))
    except BaseException as e:  # report, then exit non-zero like a crashed rank would
        q.put((rank, "error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))
        code = 1
    # A rank leaves as `distrl train`'s ranks do (cli.py): flush, then os._exit, skipping C++
    # destructors, which under load sometimes abort (SIGABRT) after a clean shutdown (seen in
    # a clean-clone `make test`: rank 1 exit -6 after returning its result), and after a lost
    # peer can block or abort in the process group's teardown.
    q.close()
    q.join_thread()
    os._exit(code)


def run_ranks(
    fn: Callable,
    world: int,
    *args: Any,
    timeout: float = 120.0,
    start_method: str = "forkserver",
    preload: list[str] | None = None,
    wait_for: tuple[int, ...] | None = None,
) -> tuple[dict[int, tuple[str, Any]], dict[int, int | None], float]:
    """Run ``fn(rank, world, *args)`` in ``world`` new processes.

    By default each rank forks from a forkserver that imported torch and distrl once (``PRELOAD``
    and ``preload``, module names; the first call's list is the server's): a clean
    single-threaded process in a fraction of a spawn's start time, with the caller's current
    environment. ``start_method="spawn"`` starts each from scratch.

    Returns ({rank: (status, result_or_error)}, {rank: exitcode}, elapsed seconds). Processes
    still alive after ``timeout`` are killed and reported with exitcode None; with ``wait_for``,
    so are the other ranks' as soon as those ranks have exited (a stopped rank that a test
    expects never to finish is not waited on for the whole timeout).
    """
    ctx = mp.get_context(start_method)
    if start_method == "forkserver":
        ctx.set_forkserver_preload([*PRELOAD, *(preload or []), fn.__module__])
    q: mp.Queue = ctx.Queue()
    port = free_port()
    env = dict(os.environ)
    procs = [
        ctx.Process(target=_child, args=(fn, r, world, port, q, args, env)) for r in range(world)
    ]
    t0 = time.monotonic()
    for p in procs:
        p.start()
    results: dict[int, tuple[str, Any]] = {}
    deadline = t0 + timeout
    while len(results) < world and time.monotonic() < deadline:
        try:
            rank, status, value = q.get(timeout=0.2)
            results[rank] = (status, value)
        except queue.Empty:
            waited = procs if wait_for is None else [procs[r] for r in wait_for]
            if all(not p.is_alive() for p in waited):
                try:  # drain what the last process put before exiting
                    while True:
                        rank, status, value = q.get(timeout=0.5)
                        results[rank] = (status, value)
                except queue.Empty:
                    break
    codes: dict[int, int | None] = {}
    for r, p in enumerate(procs):
        done_waiting = wait_for is not None and r not in wait_for
        p.join(0.0 if done_waiting else max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()
            codes[r] = None
        else:
            codes[r] = p.exitcode
    return results, codes, time.monotonic() - t0


def expect_ok(
    results: dict[int, tuple[str, Any]], codes: dict[int, int | None], world: int
) -> list:
    for r in range(world):
        assert codes.get(r) == 0, f"rank {r} exit code {codes.get(r)}: {results.get(r)}"
        assert results[r][0] == "ok", f"rank {r}: {results[r][1]}"
    return [pickle.loads(results[r][1]) for r in range(world)]
