"""Who am I: rank, local rank, world size, device, seed, threads, and the process group.

torchrun sets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE (and MASTER_ADDR/PORT). Every
distributed decision that depends on them is made here, in one place.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import functools
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from distrl.config import TrainConfig
from distrl.distributed.launch import default_threads


@dataclass(frozen=True)
class DistContext:
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    device: torch.device
    backend: str | None  # None: single process, no process group

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.backend is not None


def env_ranks() -> tuple[int, int, int, int]:
    """(rank, local_rank, world_size, local_world_size) from torchrun's environment."""
    g = os.environ.get
    world = int(g("WORLD_SIZE", "1"))
    return int(g("RANK", "0")), int(g("LOCAL_RANK", "0")), world, int(g("LOCAL_WORLD_SIZE", world))


def auto_uses_cuda(local_world_size: int = 1) -> bool:
    """``--device auto``: one GPU per local rank when there are that many, else every rank on
    CPU. Ranks never share a GPU: NCCL refuses two ranks on one device, and a laptop's single
    GPU under ``--nproc 2`` (``make train``) should train, not stop with an error."""
    return torch.cuda.is_available() and local_world_size <= torch.cuda.device_count()


def pick_device(spec: str, local_rank: int, local_world_size: int = 1) -> torch.device:
    if spec == "auto":
        return torch.device(f"cuda:{local_rank}" if auto_uses_cuda(local_world_size) else "cpu")
    device = torch.device(spec)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", local_rank)
    return device


def pin_to_cores(local_rank: int, local_world_size: int) -> list[int] | None:
    """Give local rank r the r-th equal share of this process's allowed cores; None when there
    are fewer cores than ranks (nothing sensible to pin) or the platform cannot pin."""
    if not hasattr(os, "sched_setaffinity") or local_world_size <= 1:
        return None
    cores = sorted(os.sched_getaffinity(0))
    share = len(cores) // local_world_size
    if share < 1:
        return None
    mine = cores[local_rank * share : (local_rank + 1) * share]
    os.sched_setaffinity(0, mine)
    return mine


def check_launch(cfg: TrainConfig) -> None:
    """Refuse contradictory launches before anything starts."""
    _, _, world, _ = env_ranks()
    if world > 1 and not cfg.distributed:
        raise ValueError(
            f"launched with WORLD_SIZE={world} (torchrun) but --distributed is False: every rank "
            f"would train alone and write the same run directory. Pass --distributed True."
        )
    if cfg.distributed:
        check_devices(cfg.device, env_ranks()[3])


def available_devices() -> list[str]:
    """What ``--device`` can be on this machine and torch build, e.g. auto, cpu, cuda:0."""
    out = ["auto", "cpu"]
    if torch.cuda.is_available():
        out += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        out.append("mps")
    return out


def check_device(spec: str, flag: str = "--device") -> None:
    """Refuse a ``--device`` that is malformed (``gpu``) or absent here (``cuda`` on a CPU build
    of torch, ``cuda:3`` with two GPUs), naming the devices there are: torch would otherwise
    fail deep inside the first rank with an AttributeError or an invalid-ordinal error."""
    if spec == "auto":
        return
    devices = available_devices()
    choices = ", ".join(devices)
    try:
        device = torch.device(spec)
    except (RuntimeError, ValueError):
        raise ValueError(
            f"{flag} {spec!r} is not a torch device; use one of: {choices} (auto picks the GPU "
            f"when there is one)"
        ) from None
    if device.type == "cpu":
        return
    if device.type == "cuda":
        if not torch.cuda.is_available():
            why = (
                f"this torch build ({torch.__version__}) has no CUDA support"
                if torch.version.cuda is None
                else "no CUDA GPU is visible (check nvidia-smi and CUDA_VISIBLE_DEVICES)"
            )
            raise ValueError(f"{flag} {spec}: {why}; use one of: {choices}")
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise ValueError(
                f"{flag} {spec}: this machine has {count} visible GPU(s); use one of: {choices}"
            )
        return
    if device.type == "mps" and "mps" in devices:
        return
    raise ValueError(f"{flag} {spec}: distrl trains on CPU or CUDA here; use one of: {choices}")


def check_backend(backend: str, device: str, local_world_size: int = 1) -> None:
    """Refuse ``--dist.backend nccl`` where the ranks would not train on CUDA (NCCL only moves
    tensors between GPUs): the process group would fail at its first collective."""
    if backend != "nccl":
        return
    on = pick_device(device, 0, local_world_size).type  # check_device has checked the spec
    if on != "cuda":
        raise ValueError(
            f"--dist.backend nccl needs CUDA devices, but the ranks would train on {on} "
            f"(--device {device}); use --dist.backend gloo, or auto (NCCL on GPUs, Gloo on CPU)"
        )
    if not dist.is_nccl_available():
        raise ValueError(
            f"--dist.backend nccl: this torch build ({torch.__version__}) has no NCCL; use "
            f"--dist.backend gloo, or auto"
        )


def check_devices(device: str, local_world_size: int) -> None:
    """Refuse more local ranks than GPUs when ranks would use CUDA: rank i takes cuda:i, so the
    extra ranks would fail inside the process group with an invalid device ordinal.

    For DD-PPO this is the only way a world can be larger than its work: each rank runs its own
    --env.num-envs, so there is nothing to split that could run out. CPU ranks are never refused
    (more ranks than cores only time-slice). First ``check_device``: the spec must name a
    device this machine has."""
    check_device(device)
    if local_world_size <= 1 or not torch.cuda.is_available() or device == "auto":
        return  # auto puts the ranks on CPU when there are fewer GPUs than ranks
    spec = torch.device(device)
    if spec.type != "cuda" or spec.index is not None:
        return  # an explicit cuda:K is the user's placement; CPU ranks have no such limit
    gpus = torch.cuda.device_count()
    if local_world_size > gpus:
        raise ValueError(
            f"{local_world_size} processes on this machine need {local_world_size} GPUs (rank i "
            f"uses cuda:i) but {gpus} are visible; use --nproc {gpus} (or fewer), make more GPUs "
            f"visible (CUDA_VISIBLE_DEVICES), or train on CPU with --device cpu"
        )


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters


def keep_freed_memory() -> bool:
    """Keep freed blocks in the process's heap instead of handing them back to the OS.

    The update allocates and frees the same MB-sized activations every minibatch. glibc's
    defaults serve such sizes with mmap/munmap and trim the heap when the top of it is free, so
    every minibatch faulted in fresh zeroed pages: the cartpole update (rsl_rl's setup, 1 thread)
    took 420 ms instead of 290 ms here. Blocks up to 32 MiB (glibc's ceiling for this setting)
    now come from the heap, and up to 1 GiB of free heap is kept. Returns whether it applied
    (glibc only; elsewhere nothing changes)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(
            libc.mallopt(_M_MMAP_THRESHOLD, 32 * 1024 * 1024)
            and libc.mallopt(_M_TRIM_THRESHOLD, 1024 * 1024 * 1024)
        )
    except (OSError, AttributeError):
        return False


def init(cfg: TrainConfig) -> DistContext:
    """Set threads and device, and join the process group when ``cfg.distributed``."""
    check_launch(cfg)
    keep_freed_memory()
    rank, local_rank, world, local_world = env_ranks() if cfg.distributed else (0, 0, 1, 1)
    torch.set_num_threads(cfg.threads or default_threads(local_world))
    device = pick_device(cfg.device, local_rank, local_world)
    if cfg.device == "auto" and device.type == "cpu" and torch.cuda.is_available() and rank == 0:
        print(
            f"distrl: {local_world} ranks on this machine but {torch.cuda.device_count()} GPU(s): "
            f"training on CPU (--device auto gives each rank its own GPU or none; use --nproc "
            f"{torch.cuda.device_count()} to train on the GPU)",
            file=sys.stderr,
        )
    if device.type == "cpu" and cfg.dist.pin_cores:
        pin_to_cores(local_rank, local_world)
    if device.type == "cpu":
        # Saturated activations make exp() underflow into denormals, which x86 handles ~100x
        # slower; flushing them to zero made the cartpole rollout 2.4x faster here.
        torch.set_flush_denormal(True)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    backend = None
    if cfg.distributed:
        backend = cfg.dist.backend
        if backend == "auto":
            backend = "nccl" if device.type == "cuda" else "gloo"
        global _store_down
        _store_down = False  # a new process group, a new store (this process may run again)
        if not dist.is_initialized():
            from distrl.distributed.launch import loopback_store

            timeout = datetime.timedelta(seconds=cfg.dist.timeout)
            dist.init_process_group(
                backend=backend,
                rank=rank,
                world_size=world,
                timeout=timeout,
                device_id=device if device.type == "cuda" else None,
                store=loopback_store(rank, world, timeout),  # None: env://
            )
        store = _store()
        if store is not None:  # where this rank runs, for release_dropped
            store.set(f"distrl/pid/{rank}", f"{socket.gethostname()} {os.getpid()}")
    return DistContext(rank, local_rank, world, local_world, device, backend)


class PeerFailure(RuntimeError):
    """A collective failed: a peer died, stalled past --dist.timeout, or lost its connection."""


class RankDropped(PeerFailure):
    """This rank was dropped by the strategy (a parameter server or a learner went on without
    it, e.g. after it stalled); the run goes on, and this rank should leave quietly."""


STORE_WAIT = 5.0
"""Seconds a rank waits for the rendezvous store to answer one operation before it stops using
the store for good (``store_op``)."""
_store_down = False


def _store():
    """The default process group's rendezvous store (None if unavailable, or given up on)."""
    if _store_down:
        return None
    try:
        from torch.distributed.distributed_c10d import _get_default_store

        return _get_default_store()
    except Exception:
        return None


def store_op(op: Callable[[Any], Any], wait: float | None = None) -> tuple[bool, Any]:
    """``(True, op(store))``, or ``(False, None)`` when there is no store or it failed or did not
    answer within ``wait`` seconds (default ``STORE_WAIT``). A read from a store whose host is
    stopped (SIGSTOP: rank 0 hosts it when not under torchrun's agent) blocks past the store's
    own timeout, so the operation runs in a daemon thread that is left behind if it does not
    answer; the client is then mid-request, so after a failure this process never uses the
    store again (heartbeats and the drop and silence reports go without it)."""
    global _store_down
    store = _store()
    if store is None:
        return False, None
    box: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            box.append((True, op(store)))
        except Exception:
            box.append((False, None))

    worker = threading.Thread(target=run, name="distrl-store", daemon=True)
    worker.start()
    worker.join(STORE_WAIT if wait is None else wait)
    if not box or not box[0][0]:
        _store_down = True
        return False, None
    return box[0]


def heartbeat(ctx: DistContext, iteration: int) -> None:
    """Record in the store that this rank entered ``iteration`` now (one small set per
    iteration); ``peer_failure`` reads these to name the rank that went silent."""
    key = f"distrl/dropped/{ctx.rank}"

    def beat(store: Any) -> str | None:
        store.set(f"distrl/alive/{ctx.rank}", f"{iteration} {time.time():.3f}")
        return store.get(key).decode() if store.check([key]) else None

    why = store_op(beat)[1]
    if why is not None:
        raise RankDropped(f"rank {ctx.rank}: dropped from the run: {why}")


def dropped_reason(rank: int) -> str | None:
    """Why ``rank`` was dropped (``release_dropped``), or None: not dropped, or no store."""
    key = f"distrl/dropped/{rank}"
    reason: str | None = store_op(
        lambda store: store.get(key).decode() if store.check([key]) else None
    )[1]
    return reason


def mark_left(rank: int) -> None:
    """A dropped rank says it is leaving (``release_dropped`` waits for this)."""
    store_op(lambda store: store.set(f"distrl/left/{rank}", "1"))


def release_dropped(dropped: dict[int, str], wait: float) -> list[int]:
    """Let ranks the strategy dropped leave: mark each in the store with why, wake those on
    this host (SIGCONT: a stalled rank may be stopped), and wait up to ``wait`` s for each to
    say it left (it then exits 0). Without this, torchrun's agent waits for a stopped rank
    forever after the others finished. Returns the ranks that did not leave in time (on
    another host and still stopped, say)."""
    if _store() is None or not dropped:
        return []
    waiting = set(dropped)
    for r, why in dropped.items():

        def mark(store: Any, r: int = r, why: str = why) -> tuple[str, int]:
            store.set(f"distrl/dropped/{r}", why)
            host, pid = store.get(f"distrl/pid/{r}").decode().split()
            return host, int(pid)

        ok, where = store_op(mark)
        if ok and where[0] == socket.gethostname():
            if _gone(where[1]):
                waiting.discard(r)  # it died: nothing to wait for
            else:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(where[1], signal.SIGCONT)
    deadline = time.time() + wait
    while waiting and time.time() < deadline:
        ok, left = store_op(functools.partial(left_ranks, ranks=frozenset(waiting)))
        if not ok:
            break  # the store is gone: nobody can say they left
        waiting -= left
        time.sleep(0.1)
    return sorted(waiting)


def silent_ranks(ctx: DistContext) -> str:
    """'rank 1 last seen at iteration 2, 10.4 s ago; ...' for every other rank, from the
    heartbeats; empty when the store cannot be read (its host may be the rank that died)."""
    if _store_down:
        return "the rendezvous store stopped answering earlier; its host may be down"
    if _store() is None:
        return ""
    ok, beats = store_op(lambda store: heartbeats(store, range(ctx.world_size), ctx.rank))
    if not ok:
        return "the rendezvous store did not answer; its host may be down"
    now = time.time()
    seen = sorted(((now - t, r, it) for r, (it, t) in beats.items()), reverse=True)
    return "; ".join(
        f"rank {r} last seen at iteration {it}, {age:.1f} s ago" for age, r, it in seen
    )


def left_ranks(store: Any, ranks: frozenset[int]) -> set[int]:
    """The ``ranks`` that said they left (``mark_left``); a ``store_op`` body."""
    return {r for r in ranks if store.check([f"distrl/left/{r}"])}


def heartbeats(store: Any, ranks: Any, me: int) -> dict[int, tuple[int, float]]:
    """{rank: (last iteration, unix time)} of the ``ranks`` (not ``me``) that sent a heartbeat;
    a ``store_op`` body."""
    seen = {}
    for r in ranks:
        key = f"distrl/alive/{r}"
        if r != me and store.check([key]):
            it, t = store.get(key).decode().split()
            seen[r] = (int(it), float(t))
    return seen


def peer_failure(ctx: DistContext, timeout: float, error: BaseException) -> PeerFailure:
    """Turn a backend error into one that names the rank that went silent, where the store can
    tell (each rank's last heartbeat), with the backend's own message."""
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    who = silent_ranks(ctx)
    return PeerFailure(
        f"rank {ctx.rank}/{ctx.world_size}: a collective failed, so a peer rank died, stalled "
        f"past --dist.timeout={timeout:g}s or lost its connection"
        + (f" ({who})" if who else "")
        + f". Backend: {first}"
    )


def shutdown(clean: bool = True, peer_lost: bool = False) -> None:
    """Tear the process group down (also on error paths); safe to call twice.

    On a clean exit every rank first meets at a barrier: a rank that destroys its Gloo group
    while a peer still has a collective in flight was seen to abort the peer at exit (about 2 in
    11 runs). On an error path there is no barrier, since the peer may be the one that died.
    After a lost peer (``peer_lost``) the group is left alone: destroying it waits on sends the
    lost peer will never read, and with the parameter server stopped (SIGSTOP) a worker was seen
    to block there past the test's 45 s, or abort; the process is about to exit anyway."""
    if peer_lost:
        return
    if dist.is_available() and dist.is_initialized():
        if clean:
            with contextlib.suppress(Exception):  # a peer already gone: nothing to wait for
                dist.barrier()
        dist.destroy_process_group()


def _gone(pid: int) -> bool:
    """The process has exited (or is a zombie waiting for its parent to reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def rank_seed(base_seed: int, rank: int) -> int:
    """Seed = base + global rank (the local rank would repeat seeds on every node)."""
    return base_seed + rank
