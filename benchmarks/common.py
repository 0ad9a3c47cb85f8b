"""Shared pieces of every benchmark: machine header, result directory, arguments, CSV, tables,
subprocess runs."""

from __future__ import annotations

import csv
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

# Tables are wide: without a terminal rich assumes 80 columns and cuts every header.
console = Console(width=None if sys.stdout.isatty() else 160)


def cores() -> int:
    """Cores this process may run on (its affinity mask where the platform has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def machine() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if "model name" in line)
    except (OSError, StopIteration):
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {
        "cpu": cpu,
        "cores": cores(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": gpu or "cpu",
        "backend": "nccl" if gpu else "gloo",
    }


def header(title: str) -> dict[str, Any]:
    m = machine()
    console.rule(f"[bold]{title}")
    console.print(
        f"machine: {m['cpu']} | {m['cores']} cores | torch {m['torch']} | python {m['python']} "
        f"| device {m['device']} | backend {m['backend']}"
    )
    return m


CHECKOUT = Path(__file__).resolve().parents[1]
"""The repository's root: ``benchmarks`` and ``tests`` are its top-level packages."""


def subprocess_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a benchmark's subprocess, the checkout's root first on
    PYTHONPATH (``python -m benchmarks.X``, ``train --import tests.fixtures.X`` from anywhere),
    ``extra`` on top."""
    path = os.pathsep.join([str(CHECKOUT), *filter(None, [os.environ.get("PYTHONPATH")])])
    return dict(os.environ, PYTHONPATH=path, **(extra or {}))


def out_dir(path: str | None, name: str) -> Path:
    p = Path(path) if path else Path("bench_out") / name
    p.mkdir(parents=True, exist_ok=True)
    return p


def parse_ints(text: str) -> list[int]:
    """'1,2,4' or '1 2 4' -> [1, 2, 4] (positive, sorted, unique)."""
    vals = sorted({int(x) for x in text.replace(",", " ").split()})
    if not vals or vals[0] < 1:
        raise ValueError(f"world sizes must be positive integers, got {text!r}")
    return vals


def split_extra(extra: tuple[str, ...]) -> list[str]:
    """``--extra`` items split like a shell: ("--a 1", "--b 2") -> ["--a", "1", "--b", "2"]."""
    return [tok for item in extra for tok in shlex.split(item)]


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)


def print_table(title: str, rows: list[dict[str, Any]], keys: list[str]) -> None:
    t = Table(*keys, title=title, title_justify="left")
    for r in rows:
        t.add_row(*(_fmt(r.get(k)) for k in keys))
    console.print(t)


def show(title: str, rows: list[dict], cols: list[tuple]) -> None:
    """Print ``rows`` with short headers: cols are (header, key) or (header, key, scale)."""
    shown = []
    for r in rows:
        d = {}
        for c in cols:
            v = r.get(c[1])
            if isinstance(v, bool):
                v = "yes" if v else "no"
            elif len(c) > 2 and isinstance(v, int | float):
                v = v * c[2]
            d[c[0]] = v
        shown.append(d)
    print_table(title, shown, [c[0] for c in cols])


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 100 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def median(xs: Iterable[float | None]) -> float | None:
    """The median of the values that are not None (None when there are none)."""
    known = [x for x in xs if x is not None]
    return statistics.median(known) if known else None


def run_json(
    module: str, args: list[str], env: dict[str, str] | None = None, timeout: float = 600
) -> dict:
    """Run ``python -m module args`` in a fresh process (clean threads, own peak memory) and
    parse the JSON object it prints on its last line."""
    e = subprocess_env(env)
    proc = subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        env=e,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{module} {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])
