"""`distrl bench comm`: all-reduce time vs message size and the latency-bandwidth (alpha-beta)
model fitted to it (Hockney 1994; Thakur, Rabenseifner & Gropp 2005 for the collectives):

    t(n) = alpha + beta * n        alpha: latency (s), 1/beta: bandwidth (bytes/s)

fitted by least squares on relative error (each point weighted by 1/t, so 4 B messages count as
much as 64 MB ones). Then the policy's gradient sync is timed three ways: flat (one all-reduce of
the flat buffer, as distrl does), per-tensor (one all-reduce per parameter) and bucketed
(DDP-style buckets, concatenated and copied back).

W ranks are spawned on this machine; Gloo on CPU, NCCL when there is a GPU per rank.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from benchmarks import common
from benchmarks.project import ring_link_params


@dataclass(frozen=True)
class CommArgs:
    world_size: int = 2
    """Ranks to spawn on this machine."""
    sizes: str = ""
    """Message sizes in bytes, comma-separated (default 4 B to 64 MiB in steps of x4)."""
    repeats: int = 20
    """Timed all-reduces per size (after --warmup); the median is reported."""
    warmup: int = 3
    """Untimed all-reduces per size first."""
    backend: Literal["auto", "gloo", "nccl"] = "auto"
    """auto: NCCL when there is a GPU per rank, Gloo otherwise."""
    bucket_mb: float = 1.0
    """Bucket size of the bucketed gradient sync, in MiB."""
    big_hidden: str = "512,256,128"
    """Hidden widths of the bigger actor and critic MLPs for the gradient-sync comparison."""
    timeout: float = 900.0
    """Seconds before the ranks are killed and the run reported as failed."""
    out: str | None = None
    """Results directory (default bench_out/comm)."""


DEFAULT_SIZES = [4 * 4**k for k in range(13)]  # 4 B ... 64 MiB


# ---- the alpha-beta fit ---------------------------------------------------------------------
def fit_alpha_beta(
    sizes: list[float], times: list[float], relative: bool = True
) -> tuple[float, float, float]:
    """Least-squares (alpha, beta, r2) of t = alpha + beta*n. ``relative`` weights every point
    by 1/t (minimizes relative error), so small messages set alpha and large ones beta.
    r2 is the coefficient of determination of log t (the plot's scale)."""
    n = np.asarray(sizes, dtype=float)
    t = np.asarray(times, dtype=float)
    if n.size < 2:
        raise ValueError("need at least two message sizes to fit alpha and beta")
    w = 1.0 / t if relative else np.ones_like(t)
    A = np.stack([np.ones_like(n), n], 1) * w[:, None]
    (alpha, beta), *_ = np.linalg.lstsq(A, t * w, rcond=None)
    pred = np.clip(alpha + beta * n, 1e-300, None)
    lt, lp = np.log(t), np.log(pred)
    ss = float(((lt - lt.mean()) ** 2).sum())
    r2 = 1.0 - float(((lt - lp) ** 2).sum()) / ss if ss > 0 else 1.0
    return float(alpha), float(beta), r2


def buckets(numels: list[int], bucket_bytes: int, elem_bytes: int = 4) -> list[list[int]]:
    """Indices of tensors grouped, in reverse order (as backward produces them, DDP's order),
    into buckets of at most ``bucket_bytes`` (a tensor larger than that gets its own)."""
    out: list[list[int]] = []
    cur: list[int] = []
    size = 0
    for i in reversed(range(len(numels))):
        b = numels[i] * elem_bytes
        if cur and size + b > bucket_bytes:
            out.append(cur)
            cur, size = [], 0
        cur.append(i)
        size += b
    if cur:
        out.append(cur)
    return out


# ---- the ranks ------------------------------------------------------------------------------
def _timed(fn, repeats: int, warmup: int, device) -> float:
    """Median over repeats of the slowest rank's time for ``fn`` (barrier before each)."""
    import torch
    import torch.distributed as dist

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(warmup):
        fn()
    sync()
    ts = torch.zeros(repeats, dtype=torch.float64)
    for i in range(repeats):
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        sync()
        ts[i] = time.perf_counter() - t0
    ts = ts.to(device)
    dist.all_reduce(ts, op=dist.ReduceOp.MAX)  # a collective ends when its slowest rank does
    return float(ts.median().cpu())


def _models(big_hidden: tuple[int, ...]):
    from distrl.config import PolicyConfig
    from distrl.envs.core import ActionSpace
    from distrl.policy import ActorCritic

    space = ActionSpace("discrete", n=2)
    big = PolicyConfig(actor_hidden=big_hidden, critic_hidden=big_hidden)
    return {
        "cartpole [64,64]": ActorCritic(4, space, PolicyConfig()),
        "mlp [" + ",".join(map(str, big_hidden)) + "]": ActorCritic(4, space, big),
    }


def _rank(rank: int, world: int, port: int, backend: str, cfg: dict, q) -> None:
    try:
        import torch.distributed as dist

        device = _join_group(rank, world, port, backend)
        points = _time_sizes(cfg, device)
        sync_rows = []
        for name, model in _models(tuple(cfg["big_hidden"])).items():
            sync_rows += _time_grad_sync(name, model, cfg, device)
        dist.destroy_process_group()
        if rank == 0:
            q.put(("ok", (points, sync_rows)))
    except BaseException:
        q.put(("error", f"rank {rank}: {traceback.format_exc()}"))
        raise SystemExit(1) from None


def _join_group(rank: int, world: int, port: int, backend: str):
    """One thread, this rank's device, the process group on loopback; returns the device."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    device = torch.device(f"cuda:{rank}" if backend == "nccl" else "cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, rank=rank, world_size=world)
    return device


def _time_sizes(cfg: dict, device) -> list[dict]:
    """Median all-reduce time of a float32 tensor of each size in ``cfg["sizes"]`` bytes."""
    import torch
    import torch.distributed as dist

    points = []
    for n_bytes in cfg["sizes"]:
        x = torch.ones(max(1, n_bytes // 4), dtype=torch.float32, device=device)
        t = _timed(lambda x=x: dist.all_reduce(x), cfg["repeats"], cfg["warmup"], device)
        points.append({"bytes": x.numel() * 4, "time_median_s": t})
    return points


def _time_grad_sync(name: str, model, cfg: dict, device) -> list[dict]:
    """``model``'s gradients synchronized flat, per tensor and bucketed: one row per method."""
    import torch
    import torch.distributed as dist

    params = [p for p in model.to(device).parameters() if p.requires_grad]
    numels = [p.numel() for p in params]
    flat = torch.randn(sum(numels), device=device)
    grads = list(flat.split(numels))  # views into the flat buffer, as in distrl's PPO
    groups = buckets(numels, cfg["bucket_bytes"])

    def per_tensor():
        for g in grads:
            dist.all_reduce(g)

    def bucketed():
        for idx in groups:
            buf = torch.cat([grads[i] for i in idx])
            dist.all_reduce(buf)
            off = 0
            for i in idx:
                grads[i].copy_(buf[off : off + grads[i].numel()])
                off += grads[i].numel()

    methods = {
        "flat": (lambda: dist.all_reduce(flat), 1),
        "per-tensor": (per_tensor, len(grads)),
        "bucketed": (bucketed, len(groups)),
    }
    return [
        {
            "model": name,
            "params": sum(numels),
            "bytes": 4 * sum(numels),
            "tensors": len(numels),
            "method": meth,
            "collectives": count,
            "time_median_s": _timed(fn, cfg["repeats"], cfg["warmup"], device),
        }
        for meth, (fn, count) in methods.items()
    ]


def run_ranks(world: int, backend: str, cfg: dict, timeout: float, target=None) -> Any:
    """Spawn ``world`` ranks running ``target(rank, world, port, backend, cfg, queue)`` (default
    this benchmark's); returns what rank 0 puts on the queue as ``("ok", result)``."""
    from distrl.distributed.launch import free_port

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(target=target or _rank, args=(r, world, port, backend, cfg, q))
        for r in range(world)
    ]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout
    result = None
    try:
        while result is None and time.monotonic() < deadline:
            try:
                result = q.get(timeout=0.5)
            except queue.Empty:
                if all(not p.is_alive() for p in procs) and q.empty():
                    break
        if result is None:
            raise RuntimeError(f"benchmark ranks gave no result within {timeout:g} s")
        if result[0] == "error":
            raise RuntimeError(result[1])
        for p in procs:
            p.join(max(1.0, deadline - time.monotonic()))
        return result[1]
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()


def comm(a: CommArgs) -> dict:
    m = common.header("distrl bench comm")
    out = common.out_dir(a.out, "comm")
    backend = choose_backend(a)
    cfg = rank_config(a)
    announce(a, backend, cfg["sizes"])
    t0 = time.perf_counter()
    points, sync_rows = run_ranks(a.world_size, backend, cfg, a.timeout)
    common.console.print(f"ranks finished in {time.perf_counter() - t0:.1f} s")
    for p in points:
        p |= {
            "W": a.world_size,
            "backend": backend,
            "repeats": a.repeats,
            "bandwidth_gbps": p["bytes"] / p["time_median_s"] / 1e9,
        }
    fit = fit_row(a, backend, points, m)
    alpha, beta = fit["alpha_s"], fit["beta_s_per_byte"]
    for r in sync_rows:
        r |= {
            "W": a.world_size,
            "backend": backend,
            "model_alpha_beta_s": r["collectives"] * alpha + beta * r["bytes"],
        }
    write_results(a, backend, m, out, points, fit, sync_rows)
    print_results(points, fit, sync_rows, out)
    return fit


def choose_backend(a: CommArgs) -> str:
    """Check the arguments; auto is NCCL when there is a GPU per rank, Gloo otherwise."""
    import torch

    if a.world_size < 2:
        raise ValueError("--world-size must be at least 2 (one rank has nothing to reduce)")
    if a.repeats < 1:
        raise ValueError("--repeats must be at least 1")
    backend = a.backend
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if backend == "auto":
        backend = "nccl" if gpus >= a.world_size else "gloo"
    if backend == "nccl" and gpus < a.world_size:
        raise ValueError(f"NCCL needs a GPU per rank: {a.world_size} ranks, {gpus} GPU(s)")
    return backend


def rank_config(a: CommArgs) -> dict:
    """What every rank measures (plain data: it travels to spawned processes)."""
    return {
        "sizes": common.parse_ints(a.sizes) if a.sizes else DEFAULT_SIZES,
        "repeats": a.repeats,
        "warmup": a.warmup,
        "bucket_bytes": int(a.bucket_mb * 2**20),
        "big_hidden": [int(x) for x in a.big_hidden.replace(",", " ").split()],
    }


def announce(a: CommArgs, backend: str, sizes: list[int]) -> None:
    note = (
        f" (oversubscribed: {a.world_size} ranks > {common.cores()} cores)"
        if (backend == "gloo" and a.world_size > common.cores())
        else ""
    )
    common.console.print(
        f"{a.world_size} ranks, {backend}{note}; {len(sizes)} sizes {sizes[0]} B .. "
        f"{sizes[-1]:,} B, median of {a.repeats} (slowest rank per repeat)"
    )


def fit_row(a: CommArgs, backend: str, points: list[dict], m: dict) -> dict:
    """The alpha-beta fit over ``points``, also as per-step ring figures, and the machine."""
    alpha, beta, r2 = fit_alpha_beta(
        [p["bytes"] for p in points], [p["time_median_s"] for p in points]
    )
    if alpha < 0 or beta <= 0:
        common.console.print(
            f"[yellow]warning: unphysical fit alpha={alpha:.3g} s, "
            f"beta={beta:.3g} s/B (noisy timings?)"
        )
    a_link, b_link = ring_link_params(alpha, beta, a.world_size)
    return {
        "W": a.world_size,
        "backend": backend,
        "alpha_s": alpha,
        "beta_s_per_byte": beta,
        "latency_us": alpha * 1e6,
        "bandwidth_gbps": (1e-9 / beta) if beta > 0 else None,
        "r2_log": r2,
        "alpha_link_s": a_link,
        "beta_link_s_per_byte": b_link,
        "cpu": m["cpu"],
        "cores": m["cores"],
        "device": m["device"],
        "torch": m["torch"],
    }


def write_results(
    a: CommArgs,
    backend: str,
    m: dict,
    out: Path,
    points: list[dict],
    fit: dict,
    sync_rows: list[dict],
) -> None:
    from benchmarks import plots

    common.write_csv(out / "allreduce.csv", points)
    common.write_csv(out / "fit.csv", [fit])
    common.write_csv(out / "gradsync.csv", sync_rows)
    plots.comm(
        points,
        fit["alpha_s"],
        fit["beta_s_per_byte"],
        sync_rows,
        out / "comm.png",
        f"all_reduce, {a.world_size} ranks, {backend} | {m['cpu']}",
    )


def print_results(points: list[dict], fit: dict, sync_rows: list[dict], out: Path) -> None:
    alpha, beta = fit["alpha_s"], fit["beta_s_per_byte"]
    a_link, b_link = fit["alpha_link_s"], fit["beta_link_s_per_byte"]
    common.show(
        "all_reduce time vs size",
        [{**p, "fit": alpha + beta * p["bytes"]} for p in points],
        [
            ("bytes", "bytes"),
            ("µs", "time_median_s", 1e6),
            ("fit µs", "fit", 1e6),
            ("GB/s", "bandwidth_gbps"),
        ],
    )
    common.console.print(
        f"fit: alpha = {alpha * 1e6:.2f} us latency, 1/beta = "
        f"{(1e-9 / beta) if beta > 0 else float('nan'):.3f} GB/s (R^2 on log t "
        f"{fit['r2_log']:.3f}); per ring step: alpha = {a_link * 1e6:.2f} us, "
        f"{(1e-9 / b_link) if b_link > 0 else float('nan'):.3f} GB/s per link"
    )
    common.show(
        "gradient sync (median)",
        sync_rows,
        [
            ("model", "model"),
            ("params", "params"),
            ("bytes", "bytes"),
            ("method", "method"),
            ("calls", "collectives"),
            ("µs", "time_median_s", 1e6),
            ("α-β µs", "model_alpha_beta_s", 1e6),
        ],
    )
    fastest: dict[str, dict] = {}
    for r in sync_rows:
        if r["model"] not in fastest or r["time_median_s"] < fastest[r["model"]]["time_median_s"]:
            fastest[r["model"]] = r
    for name, r in fastest.items():
        common.console.print(f"{name}: fastest is {r['method']}")
    common.console.print(
        f"wrote {out / 'allreduce.csv'}, {out / 'fit.csv'}, "
        f"{out / 'gradsync.csv'}, {out / 'comm.png'}"
    )
