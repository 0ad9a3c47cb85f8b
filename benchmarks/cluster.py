"""`distrl bench cluster`: many machines on one host, on the namespace testbed of
tests/cluster/testbed.py (``Testbed``; a checkout has both packages).

A flat float32 all-reduce between two nodes at several link rates, timed as `bench comm` times
it (median of the slowest rank), with the alpha-beta model t(n) = alpha + beta * n fitted per
rate (``comm.fit_alpha_beta``) and its error at every point; 1/beta is set beside the link rate
(a 2-rank ring all-reduce moves n bytes each way per rank: ``project.ring_allreduce_time``). The
W = 2 fit, turned into per-step ring figures as `bench project` does
(``project.ring_link_params``), then predicts the all-reduce at the larger world sizes of
``--worlds``, which are measured too: the projection checked past W = 2. Then, optionally, the
learner -> actor weight sync (`bench broadcast`'s routing table against naive, dist.broadcast
and one point-to-point send), every learner and actor on its own throttled link: per actor
count of ``--broadcast-actors`` one set of ranks, the routing table timed from each learner
count of ``--broadcast-learners``, each time set against the links' least time. ``--rates ''``
leaves out the all-reduce.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import common
from distrl.distributed.routing import lower_bound
from tests.cluster.testbed import MAX_NODES, Node, Testbed, missing


@dataclass(frozen=True)
class ClusterArgs:
    rates: str = "100,300,1000"
    """Link rates in Mbit/s, comma-separated (each node's link, each way) for the all-reduce;
    empty: no all-reduce, only the weight sync (--broadcast-params)."""
    sizes_mb: str = "0.01,0.1,1,4,16,64"
    """All-reduce sizes in MB (1e6 bytes of float32), comma-separated: small ones pin the
    latency alpha, large ones the bandwidth 1/beta."""
    worlds: str = "2,4"
    """Nodes (one rank each) to all-reduce over; the alpha-beta model is fitted at the smallest
    (at least 2) and predicts the others."""
    repeats: int = 3
    """Timed all-reduces per (rate, size) after --warmup; the median is reported."""
    warmup: int = 1
    """Untimed all-reduces per (rate, size) first."""
    broadcast_params: str = ""
    """Model sizes (fp32 parameters) for the learner -> actor weight sync, every learner and
    actor on its own node (empty: skipped), e.g. 1000000,10000000."""
    broadcast_learners: str = "2"
    """Learner counts (senders) for the weight sync: the ranks hold the most of them, and the
    routing table is timed with each (learners past the count idle)."""
    broadcast_actors: str = "2"
    """Actor counts (receivers) for the weight sync: one testbed and one set of ranks each."""
    broadcast_rate: float = 300.0
    """Link rate (Mbit/s) of every node during the weight-sync runs."""
    timeout: float = 900.0
    """Seconds one set of ranks may take before it is killed."""
    prefix: str = "dtrl"
    """Name prefix of the testbed's namespaces."""
    out: str | None = None
    """Results directory (default bench_out/cluster)."""


def parse_args(a: ClusterArgs) -> tuple[list[float], list[int], list[int]]:
    """(rates in Mbit/s, sizes in bytes, world sizes), checked; no rates: no all-reduce."""
    try:
        rates = [float(r) for r in a.rates.replace(",", " ").split()]
        sizes = [int(float(s) * 1e6) for s in a.sizes_mb.replace(",", " ").split()]
    except ValueError:
        raise ValueError(
            f"--rates {a.rates!r} and --sizes-mb {a.sizes_mb!r} must be numbers, e.g. 100,300"
        ) from None
    worlds = common.parse_ints(a.worlds)
    if not rates and not a.broadcast_params:
        raise ValueError("nothing to measure: give --rates, --broadcast-params or both")
    if rates and min(rates) <= 0:
        raise ValueError(f"--rates must be positive Mbit/s, got {a.rates!r}")
    if len(sizes) < 2 or min(sizes) < 4:
        raise ValueError(f"--sizes-mb needs two sizes of at least 4 bytes, got {a.sizes_mb!r}")
    if worlds[0] < 2 or worlds[-1] > MAX_NODES:
        raise ValueError(f"--worlds must be 2..{MAX_NODES} nodes, got {a.worlds!r}")
    if a.repeats < 1 or a.warmup < 0:
        raise ValueError(f"--repeats must be >= 1 and --warmup >= 0, got {a.repeats}, {a.warmup}")
    if a.broadcast_params:
        learners, actors = sync_counts(a)
        if learners[-1] + actors[-1] > MAX_NODES:
            raise ValueError(
                f"--broadcast-learners and --broadcast-actors: at most {MAX_NODES} nodes "
                f"together, got {learners[-1]} + {actors[-1]}"
            )
    return rates, sizes, worlds


def sync_counts(a: ClusterArgs) -> tuple[list[int], list[int]]:
    """(learner counts, actor counts) of the weight sync, sorted."""
    try:
        return common.parse_ints(a.broadcast_learners), common.parse_ints(a.broadcast_actors)
    except ValueError:
        raise ValueError(
            f"--broadcast-learners {a.broadcast_learners!r} and --broadcast-actors "
            f"{a.broadcast_actors!r} must be positive integers, e.g. 1,2,4"
        ) from None


def cluster(a: ClusterArgs) -> dict[str, list[dict]]:
    rates, sizes, worlds = parse_args(a)
    why = missing()
    if why:
        raise ValueError(f"bench cluster needs network namespaces: {why}")
    m = common.header("distrl bench cluster")
    out = common.out_dir(a.out, "cluster")
    common.console.print(
        f"nodes in network namespaces on this host (they share its {m['cores']} cores and memory "
        f"bus; only the link rate is emulated, with tc tbf); all-reduce on {worlds} nodes at "
        f"{rates or 'no'} Mbit/s, sizes {a.sizes_mb} MB; median of {a.repeats} after {a.warmup} "
        "warm-up"
    )
    points = allreduce_points(a, rates, sizes, worlds) if rates else []
    fits = fit_rates(points)
    bcast = weight_sync(a) if a.broadcast_params else []
    write_results(out, m, points, fits, bcast)
    return {"points": points, "fits": fits, "broadcast": bcast}


def allreduce_points(
    a: ClusterArgs, rates: list[float], sizes: list[int], worlds: list[int]
) -> list[dict]:
    """The all-reduce's median time per (rate, world size, message size)."""
    points: list[dict] = []
    # unpinned: these ranks have one thread each, and pinned to one core a rank's main and Gloo
    # threads take turns, which made 10 KB all-reduces 3-8 times slower in a run that tried it
    with Testbed(nodes=worlds[-1], prefix=a.prefix, pin_cores=False) as tb:
        for rate in rates:
            tb.set_rate(rate)
            for w in worlds:
                t0 = time.perf_counter()
                cfg = {"sizes": sizes, "repeats": a.repeats, "warmup": a.warmup}
                got = run_on_nodes(tb, "allreduce", cfg, a.timeout, tb.nodes[:w])
                common.console.print(
                    f"{rate:g} Mbit/s, {w} nodes: {time.perf_counter() - t0:.1f} s"
                )
                points += [p | {"rate_mbit": rate, "W": w} for p in got]
    return points


def fit_rates(points: list[dict]) -> list[dict]:
    """Per rate: alpha, beta of t = alpha + beta n (comm.fit_alpha_beta) at the smallest world
    size, and the fitted bandwidth against the link rate; every point (in place) gets the
    model's time (the fit itself at that W, the ring projection from it at larger W), its
    error, the nominal link's time and the goodput."""
    from benchmarks.comm import fit_alpha_beta
    from benchmarks.project import ring_allreduce_time, ring_link_params

    fits = []
    for rate in dict.fromkeys(p["rate_mbit"] for p in points):
        at_rate = [p for p in points if p["rate_mbit"] == rate]
        w0 = min(p["W"] for p in at_rate)
        pts = [p for p in at_rate if p["W"] == w0]
        alpha, beta, r2 = fit_alpha_beta([p["bytes"] for p in pts], [p["time_s"] for p in pts])
        a_link, b_link = ring_link_params(alpha, beta, w0)
        link_beta = 8 / (rate * 1e6)  # s per byte on the shaped link
        for p in at_rate:
            p["model_s"] = ring_allreduce_time(p["W"], p["bytes"], a_link, b_link)
            p["model_err"] = p["model_s"] / p["time_s"] - 1
            p["fitted"] = p["W"] == w0
            # the nominal link alone: a W-rank ring sends 2(W-1)/W n bytes per rank (alpha = 0)
            p["link_only_s"] = ring_allreduce_time(p["W"], p["bytes"], 0.0, link_beta)
            p["of_link"] = p["link_only_s"] / p["time_s"]
        fits.append(
            {
                "rate_mbit": rate,
                "W": w0,
                "backend": "gloo",
                "alpha_s": alpha,
                "beta_s_per_byte": beta,
                "bandwidth_gbps": 1e-9 / beta if beta > 0 else None,
                "alpha_link_s": a_link,
                "beta_link_s_per_byte": b_link,
                "link_fit_mbit": 8 / b_link / 1e6 if b_link > 0 else None,
                "fit_of_rate": (8 / b_link / 1e6) / rate if b_link > 0 else None,
                "r2_log": r2,
                "max_abs_err_fit": max(abs(p["model_err"]) for p in pts),
                "max_abs_err_projected": max(
                    (abs(p["model_err"]) for p in at_rate if p["W"] != w0), default=None
                ),
            }
        )
    return fits


def weight_sync(a: ClusterArgs) -> list[dict]:
    """`bench broadcast`'s methods, every learner and actor on its own throttled node: per
    actor count one set of ranks (the most learners, then the actors), the routing table timed
    with each learner count (``shape_rows``). Each row also gets what fraction of an actor's
    link the sync filled (``of_link``: the model's bits over the time, over the link rate), the
    least time the links allow (``link_bound_s``, ``sync_link_bound``) and that over the time
    (``of_bound``: well below 1, the shared cores held the sync back, not the links), and the
    time over the same method's at the fewest actors (``vs_fewest_actors``)."""
    from benchmarks.broadcast import shape_rows

    params = common.parse_ints(a.broadcast_params)
    learners, actors = sync_counts(a)
    L = learners[-1]
    rows: list[dict] = []
    for A in actors:
        with Testbed(L + A, a.broadcast_rate, prefix=a.prefix, pin_cores=False) as tb:
            cfg = {"L": L, "senders": learners, "params": params}
            cfg |= {"repeats": a.repeats, "warmup": a.warmup}
            t0 = time.perf_counter()
            timed = run_on_nodes(tb, "broadcast", cfg, a.timeout, tb.nodes)
            common.console.print(
                f"weight sync, {L} learners + {A} actors: {time.perf_counter() - t0:.1f} s"
            )
        rows += shape_rows(L, A, timed, "gloo", common.cores() < L + A)
    bw = a.broadcast_rate * 1e6 / 8
    fewest = {(r["method"], r["senders"], r["params"]): r for r in rows if r["A"] == actors[0]}
    for r in rows:
        r["rate_mbit"] = a.broadcast_rate
        r["of_link"] = r["bytes"] / bw / r["time_median_s"]
        r["link_bound_s"] = sync_link_bound(r["method"], r["bytes"], r["A"], r["senders"], bw)
        r["of_bound"] = r["link_bound_s"] / r["time_median_s"]
        base = fewest[(r["method"], r["senders"], r["params"])]
        r["vs_fewest_actors"] = r["time_median_s"] / base["time_median_s"]
    return rows


def sync_link_bound(method: str, model_bytes: int, A: int, senders: int, bw: float) -> float:
    """The least seconds a weight sync's schedule leaves to the links (``bw`` bytes/s each way):
    routing and naive, the routing table's lower bound (every actor takes in the model; the
    senders send A models between them); broadcast, Gloo's binomial tree
    (``binomial_tree_time``); p2p, one model over one link."""
    if method in ("routing", "naive"):
        return lower_bound(model_bytes, A, senders, bw, bw)
    if method == "broadcast":
        return binomial_tree_time(A + 1, model_bytes / bw)
    return model_bytes / bw


def binomial_tree_time(ranks: int, model_s: float) -> float:
    """When the last of ``ranks`` holds the model in Gloo's broadcast (gloo/broadcast.cc), if
    one model crosses a link in ``model_s``: virtual rank v, once it has the whole model, sends
    it to every v + 2**i with 2**i > v at once (its link shared among them); the root is 0."""
    done = [0.0] * ranks
    for v in range(ranks):  # a child's virtual rank is above its parent's
        kids = [v + 2**i for i in range(ranks.bit_length()) if 2**i > v and v + 2**i < ranks]
        for c in kids:
            done[c] = done[v] + len(kids) * model_s
    return max(done)


def run_on_nodes(tb: Testbed, what: str, cfg: dict, timeout: float, nodes: Sequence[Node]) -> Any:
    """One rank per node of ``nodes`` (``python -m benchmarks.cluster``), the process group
    on the first; returns rank 0's result (the JSON it prints last). A rank that fails ends the
    others at once (they would wait on it until Gloo's own timeout)."""
    world = len(nodes)
    master = f"{nodes[0].ip}:29500"  # every node has its own network stack: the port is free
    with contextlib.ExitStack() as stack:
        logs = [stack.enter_context(tempfile.TemporaryFile("w+")) for _ in nodes]
        procs = [
            tb.popen(
                n,
                [sys.executable, "-m", "benchmarks.cluster", what, str(rank), str(world), master]
                + [json.dumps(cfg)],
                env=common.subprocess_env({"OMP_NUM_THREADS": "1"}),
                stdout=log,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for rank, (n, log) in enumerate(zip(nodes, logs, strict=True))
        ]
        deadline = time.monotonic() + timeout
        try:
            while True:
                done = [p.poll() is not None for p in procs]
                bad = next((i for i, p in enumerate(procs) if p.returncode not in (None, 0)), None)
                if bad is not None:
                    code = procs[bad].returncode
                    raise RuntimeError(f"{what} rank {bad} failed ({code}):\n{_tail(logs[bad])}")
                if all(done):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{what} ranks still running after {timeout:g} s (killed)")
                time.sleep(0.05)
            logs[0].seek(0)
            return json.loads(logs[0].read().strip().splitlines()[-1])
        finally:
            for p in procs:
                if p.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(p.pid, signal.SIGKILL)
                    p.wait()


def _tail(log: Any, chars: int = 3000) -> str:
    log.seek(0)
    return log.read()[-chars:]


def _rank_main(what: str, rank: int, world: int, master: str, cfg: dict) -> None:
    """One rank on a node: join the group over the node's link, time, print rank 0's rows."""
    import datetime

    import torch
    import torch.distributed as dist

    from benchmarks.comm import _time_sizes

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://{master}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=600),
    )
    device = torch.device("cpu")
    rows: list[dict] = []
    if what == "allreduce":
        rows = [
            {"bytes": p["bytes"], "time_s": p["time_median_s"]} for p in _time_sizes(cfg, device)
        ]
    elif what == "broadcast":
        from benchmarks.broadcast import _time_methods

        bgroup = dist.new_group([0, *range(cfg["L"], world)])
        for n in cfg["params"]:
            rows += _time_methods(rank, world, n, cfg["L"], device, bgroup, cfg)
    else:
        raise ValueError(f"unknown measurement {what!r}: allreduce or broadcast")
    dist.destroy_process_group()
    if rank == 0:
        print(json.dumps(rows), flush=True)


def write_results(
    out: Path, m: dict, points: list[dict], fits: list[dict], bcast: list[dict]
) -> None:
    machine = {"cpu": m["cpu"], "cores": m["cores"], "torch": m["torch"]}
    written = []
    if bcast:
        common.write_csv(out / "weight_sync.csv", [r | machine for r in bcast])
        written.append("weight_sync.csv")
        show_weight_sync(bcast)
    if points:
        written += write_allreduce(out, m, points, fits)
    common.console.print(f"wrote {', '.join(str(out / w) for w in written)}")


def write_allreduce(out: Path, m: dict, points: list[dict], fits: list[dict]) -> list[str]:
    """The all-reduce's and the fits' CSVs, plot and tables; returns the file names."""
    machine = {"cpu": m["cpu"], "cores": m["cores"], "torch": m["torch"]}
    common.write_csv(out / "allreduce.csv", [p | machine for p in points])
    common.write_csv(out / "fit.csv", [f | machine for f in fits])
    written = ["allreduce.csv", "fit.csv"]
    for f in fits:  # one file per rate, in `bench comm`'s fit.csv columns: for --from-comm
        name = f"fit_{f['rate_mbit']:g}mbit.csv"
        common.write_csv(out / name, [f | machine])
        written.append(name)
    _plot(points, fits, out / "cluster.png", f"nodes in namespaces, Gloo | {m['cpu']}")
    written.append("cluster.png")
    common.show(
        "all_reduce over W nodes (median of the slowest rank) vs the alpha-beta model "
        "(fitted at the smallest W, projected to the others)",
        points,
        [
            ("Mbit/s", "rate_mbit"),
            ("W", "W"),
            ("MB", "bytes", 1e-6),
            ("ms", "time_s", 1e3),
            ("model ms", "model_s", 1e3),
            ("model err", "model_err"),
            ("fitted", "fitted"),
            ("link-only ms", "link_only_s", 1e3),
            ("of link", "of_link"),
        ],
    )
    common.show(
        "alpha-beta fit per link rate (per ring step: alpha, 1/beta)",
        fits,
        [
            ("Mbit/s", "rate_mbit"),
            ("at W", "W"),
            ("alpha ms", "alpha_link_s", 1e3),
            ("1/beta Mbit/s", "link_fit_mbit"),
            ("of rate", "fit_of_rate"),
            ("R^2 log", "r2_log"),
            ("max |err| fit", "max_abs_err_fit"),
            ("max |err| proj", "max_abs_err_projected"),
        ],
    )
    return written


def show_weight_sync(rows: list[dict]) -> None:
    common.show(
        "learner -> actor weight sync, one node each (median of the slowest rank; senders: "
        "learners that sent; GB/s: actors x model / time; bound: the links' least time)",
        rows,
        [
            ("Mbit/s", "rate_mbit"),
            ("params", "params"),
            ("A", "A"),
            ("senders", "senders"),
            ("method", "method"),
            ("s", "time_median_s"),
            ("GB/s", "aggregate_gbps"),
            ("of link", "of_link"),
            ("x naive", "vs_naive"),
            ("x 1 sender", "vs_one_sender"),
            ("bound s", "link_bound_s"),
            ("of bound", "of_bound"),
            ("x fewest A", "vs_fewest_actors"),
        ],
    )


def _plot(points: list[dict], fits: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for f in fits:
        for w, marker in zip(sorted({p["W"] for p in points}), "os^vD", strict=False):
            pts = [p for p in points if p["rate_mbit"] == f["rate_mbit"] and p["W"] == w]
            x = [p["bytes"] / 1e6 for p in pts]
            label = f"{f['rate_mbit']:g} Mbit/s, W={w}"
            (line,) = ax.plot(x, [p["time_s"] for p in pts], marker, label=label)
            style = "-" if w == f["W"] else "--"
            ax.plot(x, [p["model_s"] for p in pts], style, color=line.get_color(), alpha=0.6)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("all-reduce size (MB)")
    ax.set_ylabel("time (s)")
    ax.set_title(title, fontsize=9)
    ax.legend(title="measured; fit (-), projected (--)", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


@contextlib.contextmanager
def _reporting() -> Iterator[None]:
    try:
        yield
    except BaseException:
        traceback.print_exc()
        raise SystemExit(1) from None


if __name__ == "__main__":  # a rank: python -m benchmarks.cluster WHAT RANK WORLD ADDR:PORT CFG
    with _reporting():
        w, r, n, addr, c = sys.argv[1:6]
        _rank_main(w, int(r), int(n), addr, json.loads(c))
