"""Shared by the reliability tests: the tiny 2-rank `distrl train --nproc 2` command that the
session's ``two_rank_reference`` run (tests/conftest.py) uses, and that the determinism,
elastic-restart and namespace-testbed tests compare against (a fresh process costs seconds of
imports; we start as few as we can)."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import BIN, tiny_train_args

TWO_RANK_ITERS = 6
TWO_RANK_ARGS = [
    *tiny_train_args(8, num_minibatches=2, max_iterations=TWO_RANK_ITERS, save_interval=2),
    *["--dist.timeout", "30"],
]


def two_rank_command(run_dir: Path, *extra: str) -> list[str]:
    """`distrl train cartpole --nproc 2 --max-restarts 2 --resume auto` on a tiny config."""
    return [
        str(BIN / "distrl"),
        "train",
        "cartpole",
        "--nproc",
        "2",
        "--max-restarts",
        "2",
        "--resume",
        "auto",
        "--run-dir",
        str(run_dir),
        *TWO_RANK_ARGS,
        *extra,
    ]
