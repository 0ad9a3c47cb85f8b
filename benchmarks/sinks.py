"""`distrl bench sinks`: a parameter server's sink nodes against the flat server, on the
namespace testbed of tests/cluster/testbed.py (root): N machines of P processes each, every
machine on its own rate-limited link, ps-bsp with and without ``--dist.ps.group-size P``.

Per arm it reports the bytes that crossed the machines' links (every node's link, sent and
received, summed; a machine's ranks talk among themselves over loopback) per update, and the
median iteration time (the first iteration left out: start-up), each the median of
``--repeats`` runs with the arms alternating. Both arms run the same
processes: the flat server has (N x P - 1) workers, the sinks arm N - 1 fewer (a sink collects
nothing), so the per-update figure is the one to compare.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import common
from distrl.telemetry import read_metrics
from tests.cluster.testbed import MAX_NODES, Testbed, missing


@dataclass(frozen=True)
class SinksArgs:
    nodes: str = "2,4"
    """Machines (network namespaces), comma-separated: one run of each arm per count."""
    procs: int = 3
    """Processes per machine (torchrun's --nproc-per-node); the sinks arm's group size."""
    rate: float = 100.0
    """Each machine's link rate in Mbit/s, each way."""
    iterations: int = 6
    """Training iterations per run (cartpole, 8 envs x 16 steps per worker)."""
    repeats: int = 3
    """Runs of each arm, the arms alternating; the table gives the medians."""
    timeout: float = 600.0
    """Seconds one run may take before it is killed."""
    out: str | None = None
    """Results directory (default bench_out/sinks)."""


def run_arm(
    tb: Testbed, procs: int, group: int, iterations: int, run_dir: Path, timeout: float
) -> dict[str, Any]:
    """One ps-bsp run on every node of ``tb`` (``group`` 0: the flat server)."""
    train = Path(sys.executable).parent / "distrl-train"
    script = [
        str(train), "cartpole", "--distributed", "True", "--dist.strategy", "ps-bsp",
        "--dist.ps.group-size", str(group), "--env.num-envs", "8", "--agent.num-steps", "16",
        "--agent.max-iterations", str(iterations), "--threads", "1", "--progress", "False",
        "--tensorboard", "False", "--seed", "7", "--run-dir", str(run_dir),
    ]  # fmt: skip
    before = sum(tb.link_bytes(n) for n in tb.nodes)
    env = common.subprocess_env({"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", "OMP_NUM_THREADS": "1"})
    t0 = time.monotonic()
    logs, started = [], []
    for n in tb.nodes:
        log = run_dir.parent / f"{run_dir.name}-node{n.index}.log"
        logs.append(log)
        with log.open("w") as f:
            cmd = tb.torchrun(n, procs, 29400, script)
            started.append(tb.popen(n, cmd, env=env, stdout=f, stderr=subprocess.STDOUT))
    codes = [p.wait(timeout) for p in started]
    wall = time.monotonic() - t0
    if any(codes):
        tail = "".join(p.read_text()[-2000:] for p in logs)
        raise RuntimeError(f"a node exited with {codes}:\n{tail}")
    moved = sum(tb.link_bytes(n) for n in tb.nodes) - before
    recs = read_metrics(run_dir)
    updates = sum(r.get("train/updates", 0) for r in recs)
    times = [r["time/iteration"] for r in recs[1:]]
    return {
        "bytes": moved,
        "updates": updates,
        "bytes_per_update": moved / max(updates, 1),
        "iteration_s": common.median(times),
        "wall_s": wall,
        "workers": recs[-1].get("dist/workers"),
        "env_steps": recs[-1]["env_steps"],
    }


def sinks(a: SinksArgs) -> int:
    why = missing()
    if why:
        print(f"distrl bench sinks needs the namespace testbed: {why}", file=sys.stderr)
        return 2
    counts = common.parse_ints(a.nodes)
    if counts[0] < 2 or counts[-1] > MAX_NODES or a.procs < 2:
        print(f"--nodes must be 2..{MAX_NODES} and --procs at least 2", file=sys.stderr)
        return 2
    out = common.out_dir(a.out, "sinks")
    machine = common.header("parameter server: sink nodes against the flat server")
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for nodes in counts:
            for k in range(a.repeats):
                for arm, group in (("flat", 0), ("sinks", a.procs)):
                    with Testbed(nodes=nodes, rate_mbit=a.rate) as tb:
                        run_dir = Path(tmp) / f"{arm}-{nodes}-{k}"
                        got = run_arm(tb, a.procs, group, a.iterations, run_dir, a.timeout)
                    runs.append({"nodes": nodes, "procs": a.procs, "arm": arm, "run": k, **got})
                    common.console.print(
                        f"{nodes} nodes, {arm}, run {k + 1}: {got['bytes_per_update'] / 1e3:,.1f}"
                        f" kB per update, {got['iteration_s']:.3f} s per iteration"
                    )
    common.write_csv(out / "sinks_runs.csv", runs)
    rows: list[dict[str, Any]] = []
    for nodes in counts:
        for arm in ("flat", "sinks"):
            mine = [r for r in runs if r["nodes"] == nodes and r["arm"] == arm]
            row = {"nodes": nodes, "procs": a.procs, "arm": arm, "runs": len(mine)}
            for key in ("bytes_per_update", "iteration_s", "wall_s"):
                row[key] = common.median(r[key] for r in mine)
            rows.append(row | {"workers": mine[0]["workers"], "updates": mine[0]["updates"]})
    for r in rows:
        flat = next(x for x in rows if x["nodes"] == r["nodes"] and x["arm"] == "flat")
        r["bytes_vs_flat"] = r["bytes_per_update"] / flat["bytes_per_update"]
        r["rate_mbit"] = a.rate
        r |= {f"machine_{k}": v for k, v in machine.items()}
    common.write_csv(out / "sinks.csv", rows)
    common.show(
        f"ps-bsp on the testbed ({a.procs} processes per machine, {a.rate:g} Mbit/s links)",
        rows,
        [
            ("nodes", "nodes"),
            ("arm", "arm"),
            ("workers", "workers"),
            ("kB/update", "bytes_per_update", 1e-3),
            ("x flat", "bytes_vs_flat"),
            ("s/iteration", "iteration_s"),
        ],
    )
    common.console.print(f"wrote {out / 'sinks.csv'}")
    return 0
