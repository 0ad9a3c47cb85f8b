"""Stopping early, every rank at the same iteration: a hook's stop request (carried by the
exchange an interrupt travels in: no collective of its own). The run ends as after its last
iteration: one final checkpoint of the iteration it stopped at, exit code 0, the reason in the
last record."""

from __future__ import annotations

from pathlib import Path

import pytest

from distrl import checkpoint as ckpt
from distrl.telemetry import read_metrics
from tests.distributed.harness import expect_ok, run_ranks
from tests.distributed.workers import stop_run

pytestmark = pytest.mark.timeout(180)


def ranks(world: int, run_dir: Path, agent: dict, dist=None, ask=None, resume=None) -> list:
    """Every rank's final numbers from ``stop_run``."""
    out = run_ranks(stop_run, world, str(run_dir), agent, dist, ask, resume, timeout=150)
    return expect_ok(*out[:2], world)


@pytest.mark.parametrize("world, asking, at", [(1, 0, 2), (2, 1, 3)], ids=["1-rank", "2-ranks"])
def test_a_hook_returning_false_stops_every_rank_together_with_a_final_checkpoint(
    world, asking, at, tmp_path
):
    """One process stops after the iteration whose hook asked; ranks hear of it in the next
    iteration's exchange and all stop after that one."""
    finals = ranks(world, tmp_path / "run", dict(max_iterations=8), ask=(asking, 2))
    assert [f["iteration"] for f in finals] == [at] * world
    assert finals[asking]["stopped"] == "Ask.after_iteration returned False"
    assert all(f["interrupted"] is None for f in finals)  # a request, not a signal: exit code 0
    last = read_metrics(tmp_path / "run" / "metrics.jsonl")[-1]
    assert last["iteration"] == at
    if world > 1:  # rank 0 writes the record, and another rank asked
        other = "a hook on another rank asked to stop (request_stop)"
        assert finals[0]["stopped"] == last["stopped"] == other
    names = [p.name for p in ckpt.list_checkpoints(tmp_path / "run" / "checkpoints")]
    assert names == [f"ckpt_{at:08d}.pt"]
