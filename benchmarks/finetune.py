"""`distrl bench finetune`: RIPT's recipe measured end to end on an episodic suite, per seed:

    distrl demos SUITE --per-task K                      (once per K: the experts are scripted)
    distrl pretrain SUITE --demos FILE --seed s          behaviour cloning, evaluated held-out
    distrl train SUITE --init-from bc.pt --nproc N ...   RLOO fine-tuning with the success reward
    distrl play RUN --json ...                           its held-out success per task

and, unless ``--scratch False``, the same ``train`` without ``--init-from``. Every success
figure is the deterministic policy's, per task, over the held-out init states
(``evaluate_suite``); wall times are from each command's start to its end (start-up included).
Writes per_run.csv (one row per method, demos and seed, with every task's success) and
summary.csv (mean and spread over seeds).
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import common
from benchmarks.runs import PYTHON_CLI, quiet_train_args
from distrl.telemetry import read_metrics


@dataclass(frozen=True)
class FinetuneArgs:
    suite: str = "reach10"
    """The episodic suite (reach10; metaworld-mt10 with the metaworld extra)."""
    demos: tuple[int, ...] = (1, 5)
    """Demonstrations per task, one set of runs for each."""
    seeds: int = 3
    """Seeds 0 .. seeds-1 of pretrain and train."""
    nproc: int = 2
    """Ranks of each fine-tuning run (torchrun)."""
    scratch: bool = True
    """Also train from scratch with the same settings."""
    eval_episodes: int = 50
    """Held-out episodes per task of every evaluation (50: each held-out state once)."""
    threads: int = 1
    """Intra-op threads per rank."""
    out: str | None = None
    """Results directory (default bench_out/finetune)."""
    extra: tuple[str, ...] = (
        "--multitask.early-stop-success 0.9 --multitask.early-stop-patience 2",
        "--agent.max-iterations 150",
    )
    """Overrides of every `train` (fine-tuning and scratch)."""
    timeout: float = 3600.0
    """Seconds any one command may take."""


def _run(cmd: list[str], log: Path, timeout: float) -> float:
    """Run one `distrl` command, output to ``log``; its wall seconds. Fails naming the log."""
    t0 = time.perf_counter()
    with open(log, "w") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {proc.returncode}, log {log}):\n{tail}")
    return time.perf_counter() - t0


def _held_out(a: FinetuneArgs, path: Path, out: Path, log: Path) -> dict[str, Any]:
    """`distrl play PATH --json`: the held-out success of a run or checkpoint."""
    js = out.with_suffix(".json")
    cmd = [*PYTHON_CLI, "play", str(path), "--episodes", str(a.eval_episodes), "--json", str(js)]
    _run(cmd, log, a.timeout)
    return json.loads(js.read_text())


def _row(method: str, k: int, seed: int, held: dict[str, Any], **more: Any) -> dict[str, Any]:
    tasks = {f"task/{n}": v for n, v in held["per_task"].items()}
    return {"method": method, "demos": k, "seed": seed, "success": held["success"], **more} | tasks


def _train(a: FinetuneArgs, seed: int, run: Path, init: Path | None) -> dict[str, Any]:
    """One fine-tuning (or scratch) run and its figures."""
    if run.exists():
        shutil.rmtree(run)
    cmd = [*PYTHON_CLI, "train", a.suite, "--nproc", str(a.nproc), "--seed", str(seed)]
    cmd += ["--run-dir", str(run), *quiet_train_args(a.threads), *common.split_extra(a.extra)]
    if init is not None:
        cmd += ["--init-from", str(init)]
    seconds = _run(cmd, run.with_suffix(".log"), a.timeout)
    last = read_metrics(run / "metrics.jsonl")[-1]
    return {
        "command_s": round(seconds, 2),
        "train_s": round(float(last["wall_time"]), 2),
        "iterations": int(last["iteration"]),
        "env_steps": int(last["env_steps"]),
        "train_success": last.get("success/suite"),
    }


def finetune(a: FinetuneArgs) -> list[dict]:
    if a.seeds < 1 or not a.demos or min(a.demos) < 1 or a.nproc < 1 or a.eval_episodes < 1:
        raise ValueError("--seeds, --demos, --nproc and --eval-episodes must be at least 1")
    m = common.header(f"distrl bench finetune ({a.suite})")
    out = common.out_dir(a.out, "finetune")
    rows: list[dict[str, Any]] = []
    demo_files = {}
    for k in a.demos:
        demo_files[k] = out / f"demos-{k}.pt"
        cmd = [*PYTHON_CLI, "demos", a.suite, "--per-task", str(k), "--out", str(demo_files[k])]
        _run(cmd, out / f"demos-{k}.log", a.timeout)
    for seed in range(a.seeds):
        for k in a.demos:
            bc = out / f"bc{k}-seed{seed}"
            if bc.exists():
                shutil.rmtree(bc)
            cmd = [*PYTHON_CLI, "pretrain", a.suite, "--demos", str(demo_files[k])]
            cmd += ["--seed", str(seed), "--run-dir", str(bc), "--eval-episodes", "0"]
            bc_s = _run(cmd, bc.with_suffix(".log"), a.timeout)
            ckpt = bc / "checkpoints" / "bc.pt"
            held = _held_out(a, ckpt, bc / "held_out", out / f"play-bc{k}-seed{seed}.log")
            rows.append(_row("bc", k, seed, held, command_s=round(bc_s, 2)))
            run = out / f"ft{k}-seed{seed}"
            figures = _train(a, seed, run, ckpt)
            held = _held_out(a, run, run / "held_out", out / f"play-ft{k}-seed{seed}.log")
            rows.append(_row("bc+rloo", k, seed, held, **figures))
            _say(rows[-2:])
        if a.scratch:
            run = out / f"scratch-seed{seed}"
            figures = _train(a, seed, run, None)
            held = _held_out(a, run, run / "held_out", out / f"play-scratch-seed{seed}.log")
            rows.append(_row("rloo (scratch)", 0, seed, held, **figures))
            _say(rows[-1:])
    summary = summarize(rows) if rows else []
    for r in summary:
        r.update(suite=a.suite, nproc=a.nproc, seeds=a.seeds, cpu=m["cpu"], cores=m["cores"])
    common.write_csv(out / "per_run.csv", rows)
    common.write_csv(out / "summary.csv", summary)
    common.print_table(
        f"{a.suite}: held-out success (deterministic policy, {a.eval_episodes} episodes per task)",
        summary,
        ["method", "demos", "success_mean", "success_min", "success_max", "delta_vs_bc",
         "median_command_s", "median_iterations", "median_env_steps"],
    )  # fmt: skip
    return summary


def _say(rows: list[dict[str, Any]]) -> None:
    for r in rows:
        took = f", {r['command_s']:.1f} s" if r.get("command_s") is not None else ""
        common.console.print(
            f"{r['method']} ({r['demos']} demos) seed {r['seed']}: held-out success "
            f"{r['success']:.3f}{took}"
        )


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (method, demos): success over seeds (mean, min, max), its gain over the BC rows of
    the same demos and seeds, median times and budgets, and every task's mean success."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["method"], r["demos"]), []).append(r)
    bc = {(r["demos"], r["seed"]): r["success"] for r in rows if r["method"] == "bc"}
    out = []
    for (method, k), rs in groups.items():
        succ = [r["success"] for r in rs]
        gains = [r["success"] - bc[(k, r["seed"])] for r in rs if (k, r["seed"]) in bc]
        tasks = [key for key in rs[0] if key.startswith("task/")]
        out.append(
            {
                "method": method,
                "demos": k,
                "success_mean": statistics.mean(succ),
                "success_min": min(succ),
                "success_max": max(succ),
                "delta_vs_bc": statistics.mean(gains) if method == "bc+rloo" and gains else None,
                "median_command_s": common.median([r.get("command_s") for r in rs]),
                "median_iterations": common.median([r.get("iterations") for r in rs]),
                "median_env_steps": common.median([r.get("env_steps") for r in rs]),
                **{t: statistics.mean(r[t] for r in rs) for t in tasks},
            }
        )
    return out
