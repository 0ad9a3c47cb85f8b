"""Host-row envs stepped in a pool of subprocesses (``--env.vectorization async`` on the
Meta-World tasks), with a serial fallback, as RIPT (Tan et al. 2025, "Interactive Post-Training
for Vision-Language-Action Models") steps its LIBERO envs.

The N rows are split into P contiguous slices; worker i owns a ``HostRowsEnv`` of its slice
(``make_rows(lo, hi)``, built in the worker) and answers two commands over its own
``multiprocessing`` pipe: ``advance`` (one step of its rows) and ``start`` (start these rows from
these init states). The pool is itself a ``HostRowsEnv``: its ``step`` sends every worker its
actions before it waits for any, and the auto-reset's init-state draws, the tensors and the
``info`` stay in this process, so a pool returns the bits of the in-process env of the same
seed. An ended row costs a second round trip to its worker (only then).

Why pipes rather than Gymnasium's ``AsyncVectorEnv``: that is one subprocess per env, each
resetting from its own RNG (the draws would not be the env generator's); restarting chosen rows
from chosen init states (``reset_rows``) would be a ``call`` per row; and its same-step
auto-reset is its own. A worker per slice keeps the episodic contract in one place
(``HostRowsEnv``) and the pool to P processes, P at most the cores.

Workers ignore SIGINT and SIGHUP (``async_workers``: the training process stops them with
``close``), exit when their parent is gone (its pipe closes, or they find themselves reparented
within a second), and a worker that raises or dies is named in one ``EnvWorkerError`` line
instead of a hang. ``make_pooled`` falls back to the in-process env, with one warning naming
why, when the pool cannot start.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import warnings
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

import numpy as np
import torch

from distrl.envs import async_workers
from distrl.envs.host_rows import HostRowsEnv

PARENT_CHECK_S = 1.0  # how often an idle worker checks that its parent is alive
CLOSE_WAIT_S = 5.0  # how long close waits for a worker before killing it


class EnvWorkerError(RuntimeError):
    """A pool worker raised or died; the message names it, its rows and what happened."""


class PoolStartError(RuntimeError):
    """The pool could not start (``make_pooled`` falls back to the in-process env)."""


def default_workers(num_envs: int) -> int:
    """min(rows, this rank's share of the cores: cores / ranks on this machine)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    ranks = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    return max(1, min(num_envs, (cores or 1) // ranks))


def split(num_envs: int, num_workers: int) -> list[tuple[int, int]]:
    """Row ranges [lo, hi) of ``num_workers`` workers, sizes differing by at most one."""
    base, extra = divmod(num_envs, num_workers)
    bounds = [0]
    for i in range(num_workers):
        bounds.append(bounds[-1] + base + (i < extra))
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def _work(conn: Connection, make_rows: Callable[[int, int], HostRowsEnv], lo: int, hi: int) -> None:
    """A worker's loop: build rows lo..hi-1, then answer commands until ``close`` or EOF."""
    async_workers.ignore_signals()
    parent = os.getppid()
    try:
        env = make_rows(lo, hi)
        shape = (env.obs_rows, env.num_init_states, env.max_episode_steps, env.action_space)
        conn.send(("ok", shape))
        while True:
            while not conn.poll(PARENT_CHECK_S):
                if os.getppid() != parent:
                    return
            command, args = conn.recv()
            if command == "advance":
                out = env.advance(args)
                conn.send(("ok", (env.obs_rows, *out)))
            elif command == "start":
                env.start_rows(*args)
                conn.send(("ok", env.obs_rows))
            else:  # close
                env.close()
                return
    except (EOFError, BrokenPipeError):
        return  # the parent is gone
    except BaseException as e:
        text = " ".join(f"{type(e).__name__}: {e}".split())  # one line
        with contextlib.suppress(OSError, ValueError):  # the parent may be gone
            conn.send(("error", text))


class EpisodicPool(HostRowsEnv):
    """``num_envs`` rows over ``num_workers`` subprocesses, worker i stepping
    ``make_rows(lo_i, hi_i)`` (a picklable function of the row range, run in the worker: the
    rows' env on the CPU). ``name`` names the workers in errors. ``start_method``:
    multiprocessing's (None: its default). Raises ``PoolStartError`` if the pool cannot start."""

    def __init__(
        self,
        make_rows: Callable[[int, int], HostRowsEnv],
        num_envs: int,
        num_workers: int,
        device: torch.device | str = "cpu",
        name: str = "env",
        start_method: str | None = None,
    ) -> None:
        if not 1 <= num_workers <= num_envs:
            raise ValueError(f"--env.num-workers must be in 1..{num_envs} (the envs), got "
                             f"{num_workers}")  # fmt: skip
        self.num_envs, self.device, self.name = num_envs, torch.device(device), name
        self.slices = split(num_envs, num_workers)
        self.generator = torch.Generator().manual_seed(0)
        self.conns: list[Connection] = []
        self.procs: list[Any] = []
        try:
            ctx: Any = multiprocessing.get_context(start_method)
            with async_workers.starting():
                for lo, hi in self.slices:
                    ours, theirs = ctx.Pipe()
                    proc = ctx.Process(
                        target=_work, args=(theirs, make_rows, lo, hi), daemon=True,
                        name=f"{name} worker {len(self.procs)}",
                    )  # fmt: skip
                    proc.start()
                    theirs.close()  # ours alone: EOF when the worker is gone
                    self.conns.append(ours)
                    self.procs.append(proc)
            ready = [self._receive(i) for i in range(num_workers)]
        except Exception as e:  # a start method, a pickle, a worker that fails to build its rows
            self.close()
            raise PoolStartError(" ".join(f"{type(e).__name__}: {e}".split())) from e
        limits = {r[2] for r in ready}
        if len(limits) != 1:
            self.close()
            raise ValueError(f"{name}: the workers' rows end episodes at {sorted(limits)} steps")
        self.obs_rows = np.concatenate([r[0] for r in ready])
        self.num_init_states = min(r[1] for r in ready)
        self.max_episode_steps = limits.pop()
        self.obs_dim, self.action_space = self.obs_rows.shape[1], ready[0][3]

    def _where(self, i: int) -> str:
        lo, hi = self.slices[i]
        return f"{self.name} worker {i} of {len(self.slices)} (rows {lo}..{hi - 1}, pid " \
               f"{self.procs[i].pid})"  # fmt: skip

    def _send(self, i: int, command: str, args: Any) -> None:
        try:
            self.conns[i].send((command, args))
        except (BrokenPipeError, ConnectionResetError, EOFError) as e:
            raise EnvWorkerError(f"{self._where(i)} is gone ({self._death(i)})") from e

    def _death(self, i: int) -> str:
        proc = self.procs[i]
        proc.join(CLOSE_WAIT_S)
        code = proc.exitcode
        if code is None:
            return "its pipe closed"
        if code < 0:
            return f"killed by {signal.Signals(-code).name}"
        return f"exit code {code}"

    def _receive(self, i: int) -> Any:
        conn, proc = self.conns[i], self.procs[i]
        wait([conn, proc.sentinel])
        try:
            status, payload = conn.recv() if conn.poll() else ("dead", None)
        except (EOFError, ConnectionResetError):
            status, payload = "dead", None
        if status == "ok":
            return payload
        if status == "error":
            raise EnvWorkerError(f"{self._where(i)} raised {payload}")
        raise EnvWorkerError(f"{self._where(i)} died ({self._death(i)})")

    def start_rows(self, rows: Sequence[int] | np.ndarray, inits: Sequence[int]) -> None:
        at, init = np.asarray(rows, dtype=np.int64), np.asarray(inits, dtype=np.int64)
        asked = []
        for i, (lo, hi) in enumerate(self.slices):
            mine = (at >= lo) & (at < hi)
            if mine.any():
                self._send(i, "start", ((at[mine] - lo).tolist(), init[mine].tolist()))
                asked.append(i)
        for i in asked:
            lo, hi = self.slices[i]
            self.obs_rows[lo:hi] = self._receive(i)

    def advance(self, actions: np.ndarray) -> tuple[np.ndarray, ...]:
        for i, (lo, hi) in enumerate(self.slices):
            self._send(i, "advance", actions[lo:hi])
        parts = [self._receive(i) for i in range(len(self.slices))]
        for (lo, hi), part in zip(self.slices, parts, strict=True):
            self.obs_rows[lo:hi] = part[0]
        return tuple(np.concatenate([p[k] for p in parts]) for k in range(1, 5))

    def close(self) -> None:
        """Stop every worker: ``close`` to each, then wait, then kill what is left."""
        for conn in self.conns:
            with contextlib.suppress(OSError, ValueError):  # gone already
                conn.send(("close", None))
        for proc in self.procs:
            proc.join(CLOSE_WAIT_S)
            if proc.is_alive():
                proc.kill()
                proc.join()
        for conn in self.conns:
            conn.close()
        self.conns, self.procs = [], []


def make_pooled(
    make_rows: Callable[[int, int], HostRowsEnv],
    serial: Callable[[], HostRowsEnv],
    num_envs: int,
    num_workers: int,
    device: torch.device | str,
    name: str,
    start_method: str | None = None,
) -> HostRowsEnv:
    """An ``EpisodicPool`` of ``num_workers`` (0: ``default_workers``) over ``make_rows``; if it
    cannot start, one warning naming why and ``serial()``, the same env in this process."""
    workers = num_workers or default_workers(num_envs)
    try:
        return EpisodicPool(make_rows, num_envs, workers, device, name, start_method)
    except PoolStartError as e:
        warnings.warn(
            f"--env.vectorization async: the {name} pool of {workers} subprocesses could not "
            f"start ({e}); stepping its envs in this process",
            stacklevel=2,
        )
        return serial()
