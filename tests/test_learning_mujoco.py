"""PPO on the batched MuJoCo tasks: a few halfcheetah iterations run end to end and report finite
returns and losses, and hopper's defaults learn to hop within 20 iterations. Marked slow; the
1M-step learning targets are measured by `distrl bench solve` (docs/benchmarks.md), not here."""

from __future__ import annotations

import math
import sys

import pytest

from distrl.telemetry import read_metrics
from tests.distributed.workers import run_cli

pytest.importorskip("mujoco", reason="needs the mujoco extra (make setup-mujoco)")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def test_halfcheetah_few_iterations(tmp_path) -> None:
    run_dir = tmp_path / "halfcheetah"
    # 64-step episodes: every env finishes one per iteration, so returns are logged.
    flags = "--agent.max-iterations 4 --env.max-episode-steps 64 --threads 1 --seed 1"
    flags += " --progress False --tensorboard False"
    cmd = [sys.executable, "-m", "distrl.cli", "train", "halfcheetah", "--run-dir", str(run_dir)]
    code, _, err, _ = run_cli([*cmd, *flags.split()], timeout=150)
    assert code == 0, err[-3000:]
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert [r["iteration"] for r in rows] == [1, 2, 3, 4]
    assert rows[-1]["env_steps"] == 4 * 2048
    for r in rows:
        assert math.isfinite(r["episode_return_mean"])
        assert r["episode_length_mean"] == 64
        for key in ("loss/policy", "loss/value", "approx_kl"):
            assert math.isfinite(r[key]), (key, r)


@pytest.mark.long
def test_hopper_defaults_learn_to_hop(tmp_path) -> None:
    # 20 iterations = 41k steps (~12 s): a random policy falls after ~20 steps (return ~15);
    # the defaults reached ~220 by then in every tuning run, and 1442+ within 1M steps
    run_dir = tmp_path / "hopper"
    flags = "--agent.max-iterations 20 --threads 1 --seed 1 --progress False --tensorboard False"
    cmd = [sys.executable, "-m", "distrl.cli", "train", "hopper", "--run-dir", str(run_dir)]
    code, _, err, _ = run_cli([*cmd, *flags.split()], timeout=150)
    assert code == 0, err[-3000:]
    returns = [r["episode_return_mean"] for r in read_metrics(run_dir / "metrics.jsonl")]
    assert returns[0] < 40.0, returns[0]
    assert max(returns) > 120.0, returns
