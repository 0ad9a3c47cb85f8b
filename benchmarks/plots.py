"""Figures of the scaling benchmarks (matplotlib, Agg backend: no display needed).

Each function takes the rows the command also writes to CSV, so a figure can be redrawn from
the CSV alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _save(fig: Any, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _num(v: Any) -> float:
    return float("nan") if v is None or v == "" else float(v)


def scaling(summary: list[dict], path: Path, title: str) -> None:
    """FPS vs W (measured, ideal W*FPS(1), hardware ceiling), speedup, efficiency, and the
    stacked per-iteration time breakdown."""
    ws = [int(r["W"]) for r in summary]
    fps = [_num(r["fps_mean"]) for r in summary]
    std = [_num(r["fps_std"]) for r in summary]
    ceil = [_num(r["ceiling_fps"]) for r in summary]
    base = next((_num(r["fps_mean"]) for r in summary if int(r["W"]) == 1), None)
    fig, ax = plt.subplots(2, 2, figsize=(11, 8))
    a = ax[0, 0]
    a.errorbar(ws, fps, yerr=std, marker="o", capsize=3, label="measured FPS(W)")
    if base is not None:
        a.plot(ws, [w * base for w in ws], "k--", label="ideal W·FPS(1)")
    a.plot(ws, ceil, "s:", color="tab:green", label="ceiling: W independent processes")
    a.set(xlabel="world size W", ylabel="env-steps/s", title="throughput")
    a.set_xticks(ws)
    a.legend()
    a = ax[0, 1]
    a.plot(ws, [_num(r["speedup"]) for r in summary], "o-", label="S(W)=FPS(W)/FPS(1)")
    a.plot(ws, ws, "k--", label="ideal")
    if base:
        a.plot(ws, [c / base for c in ceil], "s:", color="tab:green", label="ceiling / FPS(1)")
    a.set(xlabel="world size W", ylabel="speedup", title="speedup")
    a.set_xticks(ws)
    a.legend()
    a = ax[1, 0]
    a.plot(ws, [_num(r["efficiency"]) for r in summary], "o-", label="E(W)=S(W)/W")
    a.plot(
        ws,
        [_num(r["efficiency_vs_ceiling"]) for r in summary],
        "s:",
        color="tab:green",
        label="FPS(W) / ceiling(W)",
    )
    a.axhline(1.0, color="k", ls="--", lw=0.8)
    a.set(xlabel="world size W", ylabel="efficiency", title="efficiency", ylim=(0, None))
    a.set_xticks(ws)
    a.legend()
    a = ax[1, 1]
    parts = [("t_rollout", "rollout"), ("t_learn", "learn"), ("t_comm", "comm")]
    parts += [("t_sync", "sync"), ("t_other", "other")]
    bottom = [0.0] * len(ws)
    x = list(range(len(ws)))
    for key, label in parts:
        vals = [0.0 if r.get(key) in (None, "") else max(0.0, _num(r[key])) for r in summary]
        if not any(vals):
            continue
        a.bar(x, [v * 1e3 for v in vals], bottom=[b * 1e3 for b in bottom], label=label)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    a.set_xticks(x, [str(w) for w in ws])
    a.set(xlabel="world size W", ylabel="ms per iteration", title="time per iteration")
    a.legend()
    fig.suptitle(title)
    _save(fig, path)


def learning(
    curves: dict[int, list[dict]],
    medians: dict[int, dict],
    target: float | None,
    path: Path,
    title: str,
) -> None:
    """Return vs env steps and vs wall-clock: each seed thin, the median over seeds bold.

    ``curves[W]`` is a list of per-seed dicts with lists ``steps``, ``time``, ``ret``;
    ``medians[W]`` has ``steps``/``ret_s`` and ``time``/``ret_t`` on common grids."""
    fig, ax = plt.subplots(1, 2, figsize=(12, 4.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (w, seeds) in enumerate(sorted(curves.items())):
        c = colors[i % len(colors)]
        for s in seeds:
            ax[0].plot(s["steps"], s["ret"], color=c, lw=0.6, alpha=0.35)
            ax[1].plot(s["time"], s["ret"], color=c, lw=0.6, alpha=0.35)
        m = medians.get(w)
        if m:
            ax[0].plot(m["steps"], m["ret_s"], color=c, lw=2, label=f"W={w} (median)")
            ax[1].plot(m["time"], m["ret_t"], color=c, lw=2, label=f"W={w} (median)")
    for a, xl in ((ax[0], "env steps"), (ax[1], "wall-clock s")):
        if target is not None:
            a.axhline(target, color="k", ls="--", lw=0.8, label="target")
        a.set(xlabel=xl, ylabel="episode return (mean of last 100)")
        a.legend()
    ax[0].set_title("return vs env steps")
    ax[1].set_title("return vs wall-clock")
    fig.suptitle(title)
    _save(fig, path)


def comm(
    points: list[dict], alpha: float, beta: float, sync_rows: list[dict], path: Path, title: str
) -> None:
    """All-reduce time vs message size (log-log) with the alpha-beta fit; gradient-sync
    methods side by side per model."""
    fig, ax = plt.subplots(1, 2, figsize=(12, 4.5))
    a = ax[0]
    n = [int(p["bytes"]) for p in points]
    t = [float(p["time_median_s"]) * 1e6 for p in points]
    a.loglog(n, t, "o", label="measured (median)")
    grid = [min(n) * (max(n) / min(n)) ** (i / 99) for i in range(100)]
    a.loglog(
        grid,
        [(alpha + beta * x) * 1e6 for x in grid],
        "-",
        label=f"fit: α={alpha * 1e6:.1f} µs, 1/β={1e-9 / beta if beta > 0 else 0:.2f} GB/s",
    )
    a.set(xlabel="message bytes", ylabel="µs", title="all_reduce time vs size")
    a.legend()
    a = ax[1]
    models = list(dict.fromkeys(r["model"] for r in sync_rows))
    methods = list(dict.fromkeys(r["method"] for r in sync_rows))
    width = 0.8 / max(1, len(methods))
    for j, meth in enumerate(methods):
        xs, ys = [], []
        for i, mod in enumerate(models):
            row = next((r for r in sync_rows if r["model"] == mod and r["method"] == meth), None)
            if row:
                xs.append(i + j * width)
                ys.append(float(row["time_median_s"]) * 1e6)
        a.bar(xs, ys, width, label=meth)
    a.set_xticks([i + width * (len(methods) - 1) / 2 for i in range(len(models))], models)
    a.set(ylabel="µs per gradient sync", title="gradient sync: flat vs per-tensor vs bucketed")
    a.set_yscale("log")
    a.legend()
    fig.suptitle(title)
    _save(fig, path)


def projection(rows: list[dict], measured: list[dict], path: Path, title: str) -> None:
    """Projected FPS (with ideal), speedup, efficiency and time breakdown vs W (log2 x axis);
    measured points overlaid where there are any."""
    ws = [int(r["W"]) for r in rows]
    fig, ax = plt.subplots(2, 2, figsize=(11, 8))
    base = float(rows[0]["fps"]) / ws[0]
    a = ax[0, 0]
    a.loglog(ws, [float(r["fps"]) for r in rows], "o-", base=2, label="model")
    a.loglog(ws, [w * base for w in ws], "k--", base=2, label="ideal")
    if measured:
        a.loglog(
            [int(m["W"]) for m in measured],
            [float(m["fps"]) for m in measured],
            "rx",
            base=2,
            ms=9,
            label="measured",
        )
    a.set(xlabel="W", ylabel="env-steps/s", title="FPS(W)")
    a.legend()
    a = ax[0, 1]
    a.loglog(ws, [float(r["speedup"]) for r in rows], "o-", base=2, label="S(W)")
    a.loglog(ws, ws, "k--", base=2, label="ideal")
    a.set(xlabel="W", ylabel="speedup", title="speedup")
    a.legend()
    a = ax[1, 0]
    a.semilogx(ws, [float(r["efficiency"]) for r in rows], "o-", base=2, label="E(W)")
    a.semilogx(ws, [float(r["rho_comm"]) for r in rows], "s:", base=2, label="ρ_comm(W)")
    a.set(xlabel="W", ylabel="fraction", title="efficiency and comm fraction", ylim=(0, 1.05))
    a.legend()
    a = ax[1, 1]
    x = list(range(len(ws)))
    bottom = [0.0] * len(ws)
    for key in ("t_rollout", "t_learn", "t_other", "t_comm"):
        vals = [float(r[key]) * 1e3 for r in rows]
        a.bar(x, vals, bottom=bottom, label=key[2:])
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    a.set_xticks(x, [str(w) for w in ws], rotation=45)
    a.set(xlabel="W", ylabel="ms per iteration", title="t_iter(W) breakdown")
    a.legend()
    fig.suptitle(title)
    _save(fig, path)


def straggler(summary: list[dict], path: Path, title: str) -> None:
    """Env-steps/s and time to target per mode, even vs with a straggler; staleness histogram."""
    modes = list(dict.fromkeys(r["mode"] for r in summary))
    get = {(r["mode"], r["straggler"]): r for r in summary}
    fig, ax = plt.subplots(1, 3, figsize=(16, 4.5))
    x = np.arange(len(modes))
    # only the variants that ran (--straggler False runs the even one alone)
    variants = [(slow, name) for slow, name in ((False, "even"), (True, "one straggler"))
                if any(k[1] == slow for k in get)]  # fmt: skip
    width = 0.8 / max(1, len(variants))
    for j, (slow, name) in enumerate(variants):
        rows = [get.get((m, slow), {}) for m in modes]
        at = x + (j - (len(variants) - 1) / 2) * width
        ax[0].bar(at, [_num(r.get("sps")) for r in rows], width, label=name)
        ax[1].bar(at, [_num(r.get("time_to_target_s")) for r in rows], width, label=name)
    for a, yl in ((ax[0], "env-steps/s"), (ax[1], "time to target (s, median)")):
        a.set_xticks(x, modes, rotation=20)
        a.set_ylabel(yl)
        if len(variants) > 1:
            a.legend()
    slow = variants[-1][0] if variants else True  # the straggler's runs, else the even ones
    for m in modes:
        h = get.get((m, slow), {}).get("staleness_hist") or {}
        if h and any(k > 0 for k in h):
            ks = sorted(h)
            ax[2].plot(ks, [h[k] for k in ks], marker="o", label=m)
    ax[2].set(
        xlabel="iteration's mean staleness (rounded)",
        ylabel="iterations",
        title="staleness with the straggler" if slow else "staleness (no straggler)",
    )
    if ax[2].lines:
        ax[2].legend()
    fig.suptitle(title)
    _save(fig, path)


def broadcast(rows: list[dict], path: Path, title: str) -> None:
    """Aggregate GB/s vs model size per method, one panel per (L, A) shape."""
    shapes = list(dict.fromkeys((int(r["L"]), int(r["A"])) for r in rows))
    cols = min(3, len(shapes))
    nrows = (len(shapes) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(5 * cols, 3.8 * nrows), squeeze=False)
    for ax, (L, A) in zip(axes.flat, shapes, strict=False):
        for meth in dict.fromkeys(r["method"] for r in rows):
            pts = [r for r in rows if (int(r["L"]), int(r["A"])) == (L, A) and r["method"] == meth]
            ax.semilogx(
                [int(r["params"]) for r in pts],
                [_num(r["aggregate_gbps"]) for r in pts],
                "o-" if meth != "p2p" else "k--",
                label=meth if meth != "p2p" else "p2p ceiling (1 stream)",
            )
        ax.set(xlabel="fp32 parameters", ylabel="aggregate GB/s", title=f"L={L}, A={A}")
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(shapes) :]:
        ax.axis("off")
    fig.suptitle(title)
    _save(fig, path)


def roofline(phases: list[dict], gemms: list[dict], path: Path, title: str) -> None:
    """Left: one iteration measured vs its bounds (machine limit, shape-aware), stacked by
    phase. Right: GFLOP/s of each GEMM shape against the peak and the reference GEMM."""
    parts = [r for r in phases if r["phase"] != "iteration"]
    fig, ax = plt.subplots(1, 2, figsize=(13, 5))
    a = ax[0]
    bars = [("measured", "measured_s"), ("bound\n(machine limit)", "bound_s")]
    bars.append(("bound\n(shape-aware)", "shape_bound_s"))
    bottom = [0.0] * len(bars)
    for r in parts:
        vals = [max(0.0, _num(r[key])) * 1e3 for _, key in bars]
        if not any(vals):
            continue
        a.bar(range(len(bars)), vals, bottom=bottom, label=r["label"])
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    for i, b in enumerate(bottom):
        a.text(i, b, f"{b:.1f}", ha="center", va="bottom")
    a.set_xticks(range(len(bars)), [b[0] for b in bars])
    a.set(ylabel="ms per iteration", title="one iteration: measured vs bound")
    a.legend(fontsize=8)
    a = ax[1]
    shown = [r for r in gemms if r["phase"] != "reference"]
    seen: dict[tuple, dict] = {}
    for r in shown:  # one bar per distinct shape (a shape can serve several phases)
        seen.setdefault((r["kind"], int(r["M"]), int(r["K"]), int(r["N"])), r)
    labels = [f"{k} {m}×{kk}×{n}" for k, m, kk, n in seen]
    a.bar(range(len(seen)), [_num(r["gflops"]) for r in seen.values()], color="tab:blue")
    peak = max(_num(r["gflops"]) / _num(r["of_peak"]) for r in shown)
    a.axhline(peak, color="k", ls="--", lw=0.8, label=f"peak of these shapes {peak:.1f}")
    ref = next((r for r in gemms if r["phase"] == "reference"), None)
    if ref is not None:
        label = f"{ref['M']}×{ref['K']}×{ref['N']} reference {_num(ref['gflops']):.1f}"
        a.axhline(_num(ref["gflops"]), color="tab:green", ls=":", label=label)
    a.set_xticks(range(len(seen)), labels, rotation=60, ha="right", fontsize=7)
    a.set(ylabel="GFLOP/s", title="GEMM rate per shape (kind M×K×N)")
    a.set_ylim(0, 1.3 * max(peak, _num(ref["gflops"]) if ref else 0.0))
    a.legend(fontsize=8, loc="upper left")
    fig.suptitle(title, fontsize=10)
    _save(fig, path)
