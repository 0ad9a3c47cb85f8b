"""Who am I: rank, local rank, world size, device, seed, threads, and the process group.

torchrun sets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE (and MASTER_ADDR/PORT). Every
distributed decision that depends on them is made here, in one place.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import os
import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist

from distrl.config import TrainConfig
from distrl.distributed import liveness
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
        liveness.store_is_back()  # a new process group, a new store (this process may run again)
        if os.environ.get("DISTRL_ELASTIC"):  # the elastic launcher's: its strategy joins
            return DistContext(rank, local_rank, world, local_world, device, backend)
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
        liveness.register(rank)
    return DistContext(rank, local_rank, world, local_world, device, backend)


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
