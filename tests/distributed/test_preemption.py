"""DD-PPO's preemption threshold on 2 real ranks (``distrl train --nproc 2``): without a
straggler the flag changes nothing, bit for bit; with one, the slow rank's rollout ends once the
fast one's is done, and the run still trains and saves a valid checkpoint."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from distrl.telemetry import read_metrics
from tests.distributed.workers import run_cli
from tests.helpers import BIN, assert_same, final_state, tiny_train_args

pytestmark = [pytest.mark.long, pytest.mark.timeout(300)]


def train(run_dir: Path, *flags: str, task: str = "cartpole", **env: str) -> list[dict]:
    cmd = [str(BIN / "python"), "-m", "distrl.cli", "train", task, "--nproc", "2", *flags]
    cmd += ["--run-dir", str(run_dir)]
    code, out, err, _ = run_cli(cmd, timeout=240, **env)
    assert code == 0, out + err
    return read_metrics(run_dir)


def test_without_a_straggler_the_flag_changes_nothing_bitwise(tmp_path):
    """On 2 ranks F = 0.75 needs both ranks done (ceil(1.5)), so no rank is ever cut: the
    counter is written and polled every iteration, and the run is the run without the flag."""
    args = ["--agent.max-iterations", "4", *tiny_train_args(16, num_steps=16, num_minibatches=4)]
    plain = train(tmp_path / "plain", *args)
    flagged = train(tmp_path / "flagged", *args, "--dist.preempt-fraction", "0.75")
    assert all(r["dist/preempted_steps"] == 0 for r in flagged), flagged
    assert "dist/preempted_steps" not in plain[-1]
    assert [r["env_steps"] for r in plain] == [r["env_steps"] for r in flagged]
    assert_same(final_state(tmp_path / "plain", 4, 2), final_state(tmp_path / "flagged", 4, 2))


def test_a_straggler_is_cut_short_and_the_run_still_learns(tmp_path):
    """Rank 1's env steps take 8 times as long (about 4x its whole step): with F = 0.5 it stops
    once rank 0 has its rollout (after at least a quarter of it), so its rollout takes about
    rank 0's, not four times as long; the run finishes, its return rises, the checkpoint is
    valid."""
    flags = ["--import", "tests.fixtures.slow", "--agent.max-iterations", "10"]
    flags += ["--threads", "1", "--progress", "False", "--tensorboard", "False"]
    records = train(
        tmp_path / "run",
        *flags,
        "--dist.preempt-fraction",
        "0.5",
        task="slow-cartpole",
        DISTRL_SLOW_RANKS="1:8",
    )
    assert len(records) == 10
    full = 32 * 128 * 2  # cartpole's num_steps x num_envs, 2 ranks
    lost = [r["dist/preempted_steps"] for r in records]
    assert sum(x > 0 for x in lost) >= 7, lost  # most iterations cut the straggler short
    assert all(0 <= x <= full // 2 - 8 * 128 for x in lost), lost  # a quarter is always kept
    assert records[-1]["env_steps"] == 10 * full - sum(lost)
    fast = statistics.median(r["rank/0/rollout"] for r in records)
    slow = statistics.median(r["rank/1/rollout"] for r in records)
    assert slow < 2.5 * fast + 0.02, (slow, fast)  # uncut it takes 4-6x rank 0's
    returns = [r["episode_return_mean"] for r in records]
    assert returns[-1] > returns[0] + 10, returns
    final_state(tmp_path / "run", 10, 2)  # verified
