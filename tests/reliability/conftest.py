"""Shared by the reliability tests: global state put back after in-process runs, and one
uninterrupted 2-rank `distrl train --nproc 2` run that the determinism and elastic-restart tests
both compare against (a fresh process costs seconds of imports; we start as few as we can)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import BIN, tiny_train_args
from tests.reliability.workers import run_cli

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


@pytest.fixture(scope="session")
def two_rank_reference(tmp_path_factory) -> Path:
    """Run directory of one uninterrupted 2-rank run (seed 0)."""
    run_dir = tmp_path_factory.mktemp("two_rank_reference") / "run"
    code, out, err, secs = run_cli(two_rank_command(run_dir), timeout=60)
    print(f"2-rank reference run: {secs:.1f} s")
    assert code == 0, out + err
    return run_dir
