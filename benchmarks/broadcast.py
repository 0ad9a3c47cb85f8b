"""`distrl bench broadcast`: learner -> actor weight sync (the learner-actor routing table) three
ways, against the machine's point-to-point ceiling measured in the same run.

For each (learners L, actors A) shape, L + A ranks are spawned (Gloo on loopback, or NCCL with a
GPU per rank); ranks 0..L-1 hold the flat fp32 model, ranks L.. receive it. Per model size:

- **routing**: the routing table (distributed/routing.py, LPT) replayed with ``isend``/``irecv``:
  every learner sends its assigned (chunk, actor) pairs, every actor posts one ``irecv`` per
  chunk from the learner the table names; no runtime coordination (`bench cluster` also times
  it from fewer senders than learners, the others idle);
- **naive**: learner 0 sends the whole model to every actor (one ``isend`` each);
- **broadcast**: ``dist.broadcast`` from learner 0 in a group of learner 0 and the actors;
- **p2p ceiling**: one ``isend`` of the whole model from rank 0 to rank L, the others idle.

Time per sync is the median over repeats of the slowest rank (barrier before each); aggregate
GB/s = A x model bytes / time. Receivers hold one flat buffer and check every byte of it after
each method. The table's per-learner byte imbalance (busiest learner over the
mean) is reported with LPT's guarantee (4/3 - 1/(3L) of the optimum) and the table's makespan
over the link lower bound max(model/recv bw, total/(L x send bw)) at equal bandwidths.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from benchmarks import common
from benchmarks.comm import _join_group, _timed, run_ranks
from distrl.distributed.routing import lpt_guarantee, routing_table

if TYPE_CHECKING:
    from torch.distributed import Work

METHODS = ("routing", "naive", "broadcast", "p2p")
# A flat model's tensors as fractions of it (an MLP-like mix of big and small tensors), so the
# routing table has chunks of unequal size to balance.
SHAPE = (32, 16, 16, 8, 8, 4, 1, 1)
_BLOCK = 1 << 22
"""Elements per step of the pattern's fill and check (16 MiB of int32)."""


@dataclass(frozen=True)
class BroadcastArgs:
    params: str = "10000,100000,1000000,10000000,100000000"
    """Model sizes in fp32 parameters, comma-separated."""
    learners: str = "1,2"
    """Learner counts L to try."""
    actors: str = "1,2,4"
    """Actor counts A to try."""
    repeats: int = 5
    """Timed syncs per (shape, size, method) after --warmup; the median is reported."""
    warmup: int = 1
    """Untimed syncs first."""
    backend: Literal["auto", "gloo", "nccl"] = "auto"
    """auto: NCCL when there is a GPU per rank, Gloo otherwise."""
    timeout: float = 1800.0
    """Seconds one shape's ranks may take before they are killed."""
    out: str | None = None
    """Results directory (default bench_out/broadcast)."""


def model_numels(params: int) -> list[int]:
    """The tensor sizes of a flat model of ``params`` parameters (SHAPE; the remainder goes to
    the first tensor)."""
    total = sum(SHAPE)
    numels = [params * s // total for s in SHAPE]
    numels[0] += params - sum(numels)
    return numels


# ---- the ranks ------------------------------------------------------------------------------
def _posted(work: Work | None) -> Work:
    """``isend``/``irecv`` return None only on a rank outside the group; here every rank is in
    the default group."""
    if work is None:
        raise RuntimeError("point-to-point op posted on a rank outside its group")
    return work


def _rank(rank: int, world: int, port: int, backend: str, cfg: dict, q) -> None:
    try:
        import torch.distributed as dist

        device = _join_group(rank, world, port, backend)
        L = cfg["L"]
        bgroup = dist.new_group([0, *range(L, world)])  # every rank must create it
        rows = [_time_methods(rank, world, n, L, device, bgroup, cfg) for n in cfg["params"]]
        dist.destroy_process_group()
        if rank == 0:
            q.put(("ok", [r for sizes in rows for r in sizes]))
    except BaseException:
        q.put(("error", f"rank {rank}: {traceback.format_exc()}"))
        raise SystemExit(1) from None


def fill_pattern(flat) -> None:
    """Element i of ``flat`` gets the bits of the int32 i (unique and exact below 2**31), a
    block at a time: no model-sized temporary beside the model."""
    import torch

    bits = flat.view(torch.int32)
    for s in range(0, flat.numel(), _BLOCK):
        e = min(s + _BLOCK, flat.numel())
        bits[s:e] = torch.arange(s, e, dtype=torch.int32, device=flat.device)


def has_pattern(flat) -> bool:
    """Whether ``flat`` holds ``fill_pattern``'s bits, every element (compared as int32)."""
    import torch

    bits = flat.view(torch.int32)
    return all(
        torch.equal(
            bits[s : s + _BLOCK],
            torch.arange(s, min(s + _BLOCK, flat.numel()), dtype=torch.int32, device=flat.device),
        )
        for s in range(0, flat.numel(), _BLOCK)
    )


def _time_methods(rank, world, params, L, device, bgroup, cfg) -> list[dict]:
    """Every method on a model of ``params`` fp32 parameters: ranks 0..L-1 hold it, L.. receive
    it into one flat buffer. The routing table is timed once per sender count ``s`` in
    ``cfg["senders"]`` (default [L]): learners 0..s-1 send, the others idle; naive, broadcast
    and p2p send from learner 0 alone. Every receiver checks every byte after each method."""
    import torch
    import torch.distributed as dist

    if params >= 2**31:
        raise ValueError(f"at most 2**31 - 1 parameters (int32 pattern), got {params}")
    learners, actors = list(range(L)), list(range(L, world))
    flat = torch.empty(params, device=device)
    if rank < L:
        fill_pattern(flat)

    def routing(senders: int):
        table = routing_table(model_numels(params), learners[:senders], actors)
        sends, recvs = table.sends(rank), table.receives(rank)

        def push():
            ops = [
                dist.isend(
                    flat[r.chunk.start : r.chunk.start + r.chunk.numel], r.actor, tag=r.chunk.index
                )
                for r in sends
            ]
            ops += [
                dist.irecv(
                    flat[r.chunk.start : r.chunk.start + r.chunk.numel],
                    r.learner,
                    tag=r.chunk.index,
                )
                for r in recvs
            ]
            for op in ops:
                _posted(op).wait()

        return push

    def naive():
        if rank == 0:
            ops = [dist.isend(flat, a) for a in actors]
        elif rank >= L:
            ops = [dist.irecv(flat, 0)]
        else:
            ops = []
        for op in ops:
            _posted(op).wait()

    def broadcast():
        if rank == 0 or rank >= L:
            dist.broadcast(flat, src=0, group=bgroup)

    def p2p():
        if rank == 0:
            _posted(dist.isend(flat, L)).wait()
        elif rank == L:
            _posted(dist.irecv(flat, 0)).wait()

    runs = [("routing", s, routing(s)) for s in cfg.get("senders", [L])]
    runs += [("naive", 1, naive), ("broadcast", 1, broadcast), ("p2p", 1, p2p)]
    out = []
    for name, senders, fn in runs:
        if rank >= L:
            flat.zero_()
        t = _timed(fn, cfg["repeats"], cfg["warmup"], device)
        receives = rank >= L and (name != "p2p" or rank == L)
        if receives and not has_pattern(flat):
            raise RuntimeError(f"rank {rank}: {name} delivered wrong weights ({params} params)")
        out.append({"params": params, "method": name, "senders": senders, "time_median_s": t})
    return out


# ---- the command ----------------------------------------------------------------------------
def broadcast(a: BroadcastArgs) -> list[dict]:
    m = common.header("distrl bench broadcast")
    out = common.out_dir(a.out, "broadcast")
    params = common.parse_ints(a.params)
    shapes = [(L, A) for L in common.parse_ints(a.learners) for A in common.parse_ints(a.actors)]
    backend = _backend(a, max(L + A for L, A in shapes))
    rows: list[dict] = []
    for L, A in shapes:
        world = L + A
        note = (
            f" (oversubscribed: {world} ranks > {common.cores()} cores)"
            if (backend == "gloo" and world > common.cores())
            else ""
        )
        common.console.print(f"L={L} learners, A={A} actors, {backend}{note}")
        cfg = {"L": L, "params": params, "repeats": a.repeats, "warmup": a.warmup}
        t0 = time.perf_counter()
        timed = run_ranks(world, backend, cfg, a.timeout, target=_rank)
        common.console.print(f"  ranks finished in {time.perf_counter() - t0:.1f} s")
        rows += shape_rows(L, A, timed, backend, world > common.cores())
    write_results(a, m, out, backend, rows)
    return rows


def shape_rows(L: int, A: int, timed: list[dict], backend: str, oversub: bool) -> list[dict]:
    """One row per (size, method, senders) with GB/s and the routing table's balance figures
    (of the table the row's senders ran: one learner for naive, broadcast and p2p); routing
    rows also get their speed-up over the routing table from one sender (``vs_one_sender``,
    when that was timed too)."""
    rows = []
    for n in dict.fromkeys(r["params"] for r in timed):
        at_n = [r for r in timed if r["params"] == n]
        by = {r["method"]: r["time_median_s"] for r in at_n if r["method"] != "routing"}
        one = next(
            (r["time_median_s"] for r in at_n if r["method"] == "routing" and r["senders"] == 1),
            None,
        )
        for r in at_n:
            meth, s, t = r["method"], r["senders"], r["time_median_s"]
            table = routing_table(model_numels(n), list(range(s)), list(range(L, L + A)))
            moved = table.model_bytes * (1 if meth == "p2p" else A)
            gbps = moved / t / 1e9
            rows.append(
                {
                    "L": L,
                    "A": A,
                    "senders": s,
                    "params": n,
                    "bytes": table.model_bytes,
                    "method": meth,
                    "time_median_s": t,
                    "aggregate_gbps": gbps,
                    "of_p2p_ceiling": gbps / (table.model_bytes / by["p2p"] / 1e9),
                    "vs_naive": by["naive"] / t,
                    "vs_one_sender": one / t if meth == "routing" and one is not None else None,
                    "chunks": len(table.chunks),
                    "imbalance": table.imbalance(),
                    "lpt_bound": lpt_guarantee(s),
                    "makespan_over_lb": table.makespan() / table.lower_bound(),
                    "backend": backend,
                    "oversubscribed": oversub,
                }
            )
    return rows


def _backend(a: BroadcastArgs, world: int) -> str:
    import torch

    if a.repeats < 1:
        raise ValueError("--repeats must be at least 1")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    backend = a.backend
    if backend == "auto":
        backend = "nccl" if gpus >= world else "gloo"
    if backend == "nccl" and gpus < world:
        raise ValueError(f"NCCL needs a GPU per rank: {world} ranks, {gpus} GPU(s)")
    return backend


def write_results(a: BroadcastArgs, m: dict, out: Path, backend: str, rows: list[dict]) -> None:
    from benchmarks import plots

    common.write_csv(out / "broadcast.csv", rows)
    plots.broadcast(rows, out / "broadcast.png", f"weight sync, {backend} | {m['cpu']}")
    common.show(
        "learner -> actor weight sync (median of the slowest rank)",
        rows,
        [
            ("L", "L"),
            ("A", "A"),
            ("params", "params"),
            ("method", "method"),
            ("ms", "time_median_s", 1e3),
            ("GB/s", "aggregate_gbps"),
            ("of p2p", "of_p2p_ceiling"),
            ("x naive", "vs_naive"),
            ("imbal", "imbalance"),
            ("LPT bnd", "lpt_bound"),
            ("T/LB", "makespan_over_lb"),
        ],
    )
    common.console.print(f"wrote {out / 'broadcast.csv'}, {out / 'broadcast.png'}")
