"""Helpers shared by the test folders: tiny `train` flags, the CLI run in this process, a guard
that nothing starts, checkpoint loading and comparison, CSV files."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

BIN = Path(sys.executable).parent
"""This environment's console scripts (distrl, train, torchrun)."""

QUIET = ["--threads", "1", "--progress", "False", "--tensorboard", "False"]
"""`train` flags of every test run: one thread, no live display, no TensorBoard events."""


TIMING_KEYS = ("wall_time", "unix_time", "time/", "perf/", "rank/", "startup/")
"""metrics.jsonl keys (exact, or prefixes) that hold seconds: left out wherever two runs'
records are compared (``rank/<r>/*`` are a rank's seconds, ``startup/*`` the first record's)."""


def tiny_train_args(
    num_envs: int, num_steps: int = 8, num_epochs: int = 2, **agent: object
) -> list[str]:
    """`train` overrides of a seconds-long run: ``num_envs`` envs per rank, ``num_steps`` steps,
    ``num_epochs`` epochs, any other ``agent`` field as ``--agent.<field>`` (e.g.
    ``num_minibatches=2``), then ``QUIET``."""
    args = ["--env.num-envs", str(num_envs), "--agent.num-steps", str(num_steps)]
    args += ["--agent.num-epochs", str(num_epochs)]
    for name, value in agent.items():
        args += [f"--agent.{name.replace('_', '-')}", str(value)]
    return args + QUIET


def api_train(task: str, run_dir: Path, num_envs: int = 16, agent: dict | None = None, **overrides):
    """``distrl.train`` of a seconds-long run in this process: ``num_envs`` envs, 8 steps, 2
    epochs, 2 iterations (``agent`` overrides any), one thread, no display, no TensorBoard."""
    import distrl

    return distrl.train(
        task,
        run_dir=str(run_dir),
        env={"num_envs": num_envs},
        agent={"num_steps": 8, "num_epochs": 2, "max_iterations": 2, **(agent or {})},
        threads=1,
        progress=False,
        tensorboard=False,
        **overrides,
    )


def run_main(argv: list[str], capsys) -> tuple[int, str, str]:
    """``distrl <argv>`` in process: (exit code, stdout, stderr); SystemExit becomes a code."""
    from distrl import cli

    capsys.readouterr()
    try:
        code = cli.main(argv)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    out, err = capsys.readouterr()
    return code, out, err


def refuse_to_start(monkeypatch, what: str) -> None:
    """Make torchrun and the process group fail the test with ``what`` if anything reaches
    them."""
    import torch.distributed as dist

    from distrl.distributed import launch

    def no_start(*args, **kwargs):
        raise AssertionError(what)

    monkeypatch.setattr(launch, "launch", no_start)
    monkeypatch.setattr(dist, "init_process_group", no_start)


def final_state(run_dir: Path, iteration: int, world_size: int | None = None) -> dict:
    """The verified checkpoint ``iteration`` of ``run_dir`` (saved by ``world_size`` ranks when
    given), minus its wall-clock time."""
    from distrl import checkpoint as ckpt

    state, manifest = ckpt.load_checkpoint(ckpt.checkpoint_path(run_dir / "checkpoints", iteration))
    assert manifest["iteration"] == iteration
    if world_size is not None:
        assert manifest["world_size"] == world_size
    state.pop("wall_time", None)
    return state


def assert_same(a: Any, b: Any, where: str = "state") -> None:
    """Bitwise equality of nested dicts/lists of tensors and plain values."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), f"{where}: {a.keys()} != {b.keys()}"
        for k in a:
            assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list | tuple):
        assert isinstance(b, list | tuple) and len(a) == len(b), f"{where}: lengths differ"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]")
    elif torch.is_tensor(a):
        assert torch.is_tensor(b) and a.dtype == b.dtype and a.shape == b.shape, where
        a, b = a.cpu(), b.cpu()  # a run's state on a GPU against a checkpoint loaded on CPU
        same = torch.equal(a, b) or (  # NaN in the same places counts as the same
            a.is_floating_point() and torch.allclose(a, b, rtol=0, atol=0, equal_nan=True)
        )
        assert same, f"{where}: differs (max |diff| {(a - b).abs().max()})"
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def read_csv(path: Path) -> list[dict[str, str]]:
    with Path(path).open(newline="") as f:
        return list(csv.DictReader(f))


def write_csv(path: Path, rows: list[dict]) -> None:
    with Path(path).open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def run_peer(script: Path, args: list[str], cwd: Path) -> dict:
    """A peer script (peers/) run with ``--quiet`` and one OpenMP thread: its one closing JSON
    line, after asserting it exited 0 and printed nothing else as JSON."""
    cmd = [sys.executable, str(script), *args, "--quiet"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=170)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = [json.loads(s) for s in proc.stdout.splitlines() if s.startswith("{")]
    assert len(lines) == 1, proc.stdout  # --quiet: only the closing line
    return lines[0]
