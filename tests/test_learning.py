"""Does it learn? The default cartpole config reaches Gymnasium's solved threshold (475) on one
process (two ranks and the other strategies: tests/distributed/test_matrix.py), and pendulum
learns its swing-up, and DQN with n-step returns and prioritized replay learns cartpole. Marked
slow; it still fits CI's budget (~15 s each; the long ones more)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from distrl.telemetry import read_metrics

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def best_return(run_dir) -> float:
    returns = [r["episode_return_mean"] for r in read_metrics(run_dir / "metrics.jsonl")]
    return max(r for r in returns if r is not None)


# One process here; 2 ranks (and every other strategy) train the same default config to 475 in
# tests/distributed/test_matrix.py::test_on_policy_ppo_solves_cartpole_under.
@pytest.mark.parametrize("nproc", [1])
def test_default_cartpole_reaches_475(tmp_path, nproc):
    run_dir = tmp_path / f"w{nproc}"
    cmd = [
        sys.executable,
        "-m",
        "distrl.cli",
        "train",
        "cartpole",
        "--nproc",
        str(nproc),
        "--run-dir",
        str(run_dir),
        "--progress",
        "False",
        "--tensorboard",
        "False",
        "--seed",
        "1",
    ]
    if nproc == 1:
        cmd += ["--threads", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert best_return(run_dir) >= 475.0


@pytest.mark.long  # 15 s: make test keeps to about 10 minutes; CI runs it
def test_default_pendulum_learns_the_swing_up(tmp_path):
    # 30 of the default 150 iterations (~490k steps, ~15 s) at the default's starting LR (its
    # linear decay would scale with a shorter run): a random policy scores about -1200, the
    # swing-up about -200; tuning runs were at -275..-322 here, and the full run reaches -200
    run_dir = tmp_path / "pendulum"
    cmd = [sys.executable, "-m", "distrl.cli", "train", "pendulum", "--run-dir", str(run_dir)]
    cmd += ["--agent.max-iterations", "30", "--agent.lr-schedule", "constant"]
    cmd += ["--threads", "1", "--seed", "1"]
    cmd += ["--progress", "False", "--tensorboard", "False"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    returns = [r["episode_return_mean"] for r in read_metrics(run_dir / "metrics.jsonl")]
    first = next(r for r in returns if r is not None)  # the first 200-step episodes end at 4
    assert first < -900.0, first
    assert best_return(run_dir) > -600.0


@pytest.mark.long
def test_memory_task_needs_memory(tmp_path):
    """CartPole without its velocities: the LSTM policy of cartpole-novel's default config
    balances the pole to 475, the same config without the recurrent core stays below 100."""

    def train(recurrent: str) -> float:
        run_dir = tmp_path / recurrent
        cmd = [sys.executable, "-m", "distrl.cli", "train", "cartpole-novel"]
        cmd += ["--policy.recurrent", recurrent, "--run-dir", str(run_dir), "--seed", "1"]
        cmd += ["--progress", "False", "--tensorboard", "False", "--threads", "1"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=200)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return best_return(run_dir)

    assert train("lstm") >= 475.0
    assert train("none") < 100.0


@pytest.mark.long  # ~40 s on one thread
def test_dqn_with_n_step_returns_and_prioritized_replay_learns_cartpole(tmp_path):
    """DQN's cartpole defaults with --offpolicy.n-step 3 --offpolicy.prioritized True, stopped
    after 96 of its 391 iterations (24,576 env steps; the schedules still run to 391, as in the
    full run). Measured with seeds 1 and 2: the exploring policy's mean return passed 100 at
    17,408 and 16,640 env steps, 200 at 29,184 and 30,976; plain DQN passed 100 at 72,448 and
    34,304 (seed 3: never in 100k). A random policy scores about 22."""
    run_dir = tmp_path / "dqn"
    cmd = [sys.executable, "-m", "distrl.cli", "train", "cartpole", "--algorithm", "dqn"]
    cmd += ["--offpolicy.n-step", "3", "--offpolicy.prioritized", "True"]
    cmd += ["--agent.stop-at", "96", "--run-dir", str(run_dir), "--seed", "1"]
    cmd += ["--threads", "1", "--progress", "False", "--tensorboard", "False"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = read_metrics(run_dir / "metrics.jsonl")
    assert records[-1]["env_steps"] == 96 * 256 and 0.4 < records[-1]["replay/beta"] < 1.0
    assert best_return(run_dir) >= 100.0
