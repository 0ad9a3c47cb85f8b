"""Stopping early, every rank at the same iteration: ``--agent.target-return`` (decided from the
agreed episode returns, the same numbers on each rank that decides) and a hook's stop request
(carried by the exchange an interrupt travels in: no collective of its own). The run ends as
after its last iteration: one final checkpoint of the iteration it stopped at, exit code 0, the
reason in the last record; resumed, it trains on bit for bit as the run that never stopped."""

from __future__ import annotations

from pathlib import Path

import pytest

from distrl import checkpoint as ckpt
from distrl.telemetry import read_metrics
from tests.distributed.harness import expect_ok, run_ranks
from tests.distributed.workers import run_cli, stop_run
from tests.helpers import BIN, assert_same, final_state, tiny_train_args

pytestmark = pytest.mark.timeout(180)

TARGET = 30.0  # cartpole's random policy scores about 20; this config reaches 30 in ~6 iterations
AGENT = dict(num_steps=16, max_iterations=30, target_return=TARGET)
REASON = "target return 30 reached"


def ranks(world: int, run_dir: Path, agent: dict, dist=None, ask=None, resume=None) -> list:
    """Every rank's final numbers from ``stop_run``."""
    out = run_ranks(stop_run, world, str(run_dir), agent, dist, ask, resume, timeout=150)
    return expect_ok(*out[:2], world)


def stopped_at_target(run_dir: Path, world: int) -> int:
    """The iteration the run stopped at: the first whose agreed mean return reached the target,
    its last record (which says why) and its only checkpoint."""
    records = read_metrics(run_dir / "metrics.jsonl")
    reached = [r["iteration"] for r in records if (r.get("episode_return_mean") or 0) >= TARGET]
    last = records[-1]
    assert reached and reached[0] == last["iteration"] < AGENT["max_iterations"], records
    assert last["stopped"].startswith(REASON), last
    names = [p.name for p in ckpt.list_checkpoints(run_dir / "checkpoints")]
    assert names == [f"ckpt_{last['iteration']:08d}.pt"]  # (save_interval 1000: the final one)
    final_state(run_dir, last["iteration"], world_size=world)  # verified, of `world` ranks
    return last["iteration"]


@pytest.mark.parametrize("world", [1, 2])
def test_target_return_stops_every_rank_where_it_is_reached_and_resumes_bitwise(world, tmp_path):
    finals = ranks(world, tmp_path / "run", AGENT)
    at = stopped_at_target(tmp_path / "run", world)
    assert [f["iteration"] for f in finals] == [at] * world
    assert all(f["stopped"].startswith(REASON) and f["interrupted"] is None for f in finals)
    # past the target (unset), the final checkpoint trains on as the run that never stopped
    more = dict(AGENT, target_return=None, max_iterations=at + 2)
    assert [f["iteration"] for f in ranks(world, tmp_path / "run", more, resume="auto")] == [
        at + 2
    ] * world
    ranks(world, tmp_path / "reference", more)
    assert_same(
        final_state(tmp_path / "run", at + 2, world), final_state(tmp_path / "reference", at + 2)
    )


@pytest.mark.parametrize(
    "strategy, world", [("ps-bsp", 3), ("learner-actor", 2)], ids=["ps-bsp", "learner-actor"]
)
def test_target_return_stops_a_server_and_its_workers_or_learners_and_actors_together(
    strategy, world, tmp_path
):
    """A parameter server decides on every worker's episodes and its reply stops them; the
    learners decide alike and their weights stop their actors."""
    finals = ranks(world, tmp_path / "run", AGENT, dist={"strategy": strategy})
    at = stopped_at_target(tmp_path / "run", world)
    assert [f["iteration"] for f in finals] == [at] * world
    assert finals[0]["stopped"].startswith(REASON)
    assert all(f["stopped"] and f["interrupted"] is None for f in finals)


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


@pytest.mark.slow  # a launch of 2 ranks: ~10 s
@pytest.mark.parametrize("strategy", ["allreduce", "elastic"])
def test_distrl_train_on_2_ranks_stops_at_the_target_return(strategy, tmp_path):
    """The launcher's ranks (the resume of such a checkpoint: the tests above). Elastic's
    members name their rows by slot, every member's all the same: they decide alike (elastic
    starts its own ranks, so only here)."""
    run = tmp_path / "run"
    args = tiny_train_args(16, num_steps=16, num_minibatches=4, max_iterations=30)
    cmd = [str(BIN / "distrl"), "train", "cartpole", "--nproc", "2", "--run-dir", str(run)]
    cmd += [*args, "--agent.target-return", "30", "--dist.timeout", "30"]
    cmd += ["--dist.strategy", strategy]
    code, out, err, _ = run_cli(cmd, timeout=150)
    assert code == 0, out + err
    at = stopped_at_target(run, 2)
    assert f"stopped at iteration {at}: {REASON}" in out, out
