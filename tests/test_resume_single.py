"""Resume must match an uninterrupted run, parameter for parameter (single process).

The training runs go through the real entry point (``cli.parse_train_args`` + ``run_training``)
in this process: a fresh process costs ~5 s of imports per run, and everything the runner draws
from is seeded at construction or restored from the checkpoint. The fixture puts torch's global
RNG and thread count back afterwards so nothing leaks into other tests.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from distrl import checkpoint as ckpt
from distrl.args import parse_train_args
from distrl.session import run_training
from distrl.telemetry import read_metrics
from tests.helpers import assert_same, final_state, tiny_train_args

SMALL = tiny_train_args(32)


def train(run_dir: Path, *extra: str) -> dict:
    cfg = parse_train_args(["cartpole", *SMALL, "--run-dir", str(run_dir), *extra])
    return run_training(cfg)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> tuple[Path, dict]:
    run_dir = tmp_path_factory.mktemp("full")
    train(run_dir, "--agent.max-iterations", "6", "--agent.save-interval", "3")
    return run_dir, final_state(run_dir, 6)


@pytest.mark.timeout(60)
def test_resume_equals_uninterrupted_run(uninterrupted, tmp_path, capsys):
    _, full = uninterrupted
    run_dir = tmp_path / "run"
    train(run_dir, "--agent.max-iterations", "3", "--agent.save-interval", "3")
    assert [p.name for p in ckpt.list_checkpoints(run_dir / "checkpoints")] == ["ckpt_00000003.pt"]
    capsys.readouterr()
    train(run_dir, "--agent.max-iterations", "6", "--agent.save-interval", "3", "--resume", "auto")
    out = capsys.readouterr().out
    assert "resume: loaded" in out and "at iteration 3" in out, out
    resumed = final_state(run_dir, 6)

    assert resumed["iteration"] == full["iteration"] == 6
    assert resumed["env_steps"] == full["env_steps"] == 6 * 32 * 8
    assert_same(resumed["policy"], full["policy"], "policy")
    assert_same(resumed["ppo"], full["ppo"], "ppo")  # optimizer state, lr
    assert_same(resumed["ranks"][0]["obs"], full["ranks"][0]["obs"], "obs")
    assert torch.equal(resumed["shuffle_rng"], full["shuffle_rng"])

    recs = read_metrics(run_dir)
    assert [r["iteration"] for r in recs] == [1, 2, 3, 4, 5, 6]
    assert [r["env_steps"] for r in recs] == [i * 32 * 8 for i in range(1, 7)]


@pytest.mark.timeout(60)
def test_corrupt_newest_checkpoint_falls_back_to_previous(uninterrupted, tmp_path, capsys):
    _, full = uninterrupted
    run_dir = tmp_path / "run"
    # checkpoints at 2 and 4; save_interval is not part of the trajectory
    train(run_dir, "--agent.max-iterations", "4", "--agent.save-interval", "2")
    newest = ckpt.checkpoint_path(run_dir / "checkpoints", 4)
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte: only the sha256 check can see it
    newest.write_bytes(bytes(data))
    capsys.readouterr()

    train(run_dir, "--agent.max-iterations", "6", "--agent.save-interval", "2", "--resume", "auto")
    out = capsys.readouterr().out
    assert "skipped" in out and "ckpt_00000004.pt" in out and "sha256" in out, out
    assert "at iteration 2" in out, out

    resumed = final_state(run_dir, 6)
    assert_same(resumed["policy"], full["policy"], "policy")
    assert_same(resumed["ppo"], full["ppo"], "ppo")
    # the lost iterations 3-4 are logged twice; read_metrics keeps the later ones
    raw = [r["iteration"] for r in read_metrics(run_dir, dedupe=False)]
    assert raw == [1, 2, 3, 4, 3, 4, 5, 6]
    assert [r["iteration"] for r in read_metrics(run_dir)] == [1, 2, 3, 4, 5, 6]
    # the re-saved checkpoint 4 is valid again
    ckpt.verify_checkpoint(newest)


@pytest.mark.timeout(60)
def test_resume_from_missing_path_exits_nonzero_naming_it(tmp_path):
    missing = tmp_path / "no" / "such" / "ckpt_00000003.pt"
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "distrl.cli", "train", "cartpole", *SMALL]
        + ["--agent.max-iterations", "2", "--run-dir", str(run_dir), "--resume", str(missing)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert str(missing) in proc.stderr, proc.stderr
    assert "does not exist" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr  # a user error, not a crash
    assert not run_dir.exists(), "a failed resume must not create the run directory"


@pytest.mark.timeout(60)
def test_keep_checkpoints_and_stale_temporaries_through_the_cli(tmp_path, capsys):
    ckdir = tmp_path / "checkpoints"
    ckdir.mkdir()
    # the pattern save_checkpoint uses, from a writer that is gone (no pid exceeds 2**22)
    stale = ckdir / ".tmp-ckpt_00000002.pt.99999999.9f3a"
    stale.write_bytes(b"half a checkpoint")
    train(tmp_path, "--agent.max-iterations", "5", "--agent.save-interval", "1")
    train(
        tmp_path,
        "--agent.max-iterations",
        "7",
        "--agent.save-interval",
        "1",
        "--agent.keep-checkpoints",
        "2",
        "--resume",
        "auto",
    )
    out = capsys.readouterr().out
    assert not stale.exists() and stale.name in out
    assert sorted(p.name for p in ckdir.glob("ckpt_*.pt")) == [
        "ckpt_00000006.pt",
        "ckpt_00000007.pt",
    ]


@pytest.mark.timeout(60)
def test_resume_at_max_iterations_says_there_is_nothing_to_train(uninterrupted, capsys):
    run_dir, full = uninterrupted
    before = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    final = train(run_dir, "--agent.max-iterations", "6", "--resume", "auto")
    out = capsys.readouterr().out
    assert "already at iteration 6" in out and "nothing to train" in out
    assert final["iteration"] == 6
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == before


@pytest.mark.timeout(90)
def test_resume_with_reward_scaling_equals_uninterrupted_run(tmp_path):
    # pendulum's 200-step episodes span iterations: the per-env discounted return behind the
    # reward scale must come back from the checkpoint, or the resumed rewards differ
    def run(run_dir: Path, iterations: int, *extra: str) -> None:
        # adaptive LR: pendulum's default linear decay would follow each run's max-iterations
        flags = [*SMALL, "--policy.reward-normalization", "True", "--agent.save-interval", "3"]
        flags += ["--agent.lr-schedule", "adaptive"]
        flags += ["--agent.max-iterations", str(iterations), "--run-dir", str(run_dir)]
        run_training(parse_train_args(["pendulum", *flags, *extra]))

    run(tmp_path / "full", 6)
    run(tmp_path / "run", 3)
    run(tmp_path / "run", 6, "--resume", "auto")
    full, resumed = final_state(tmp_path / "full", 6), final_state(tmp_path / "run", 6)
    assert "reward_norm.inv_std" in full["policy"]
    assert float(full["policy"]["reward_norm.count"]) == 6 * 32 * 8
    assert_same(resumed["policy"], full["policy"], "policy")
    assert_same(resumed["ppo"], full["ppo"], "ppo")
    assert_same(resumed["ranks"][0]["disc_return"], full["ranks"][0]["disc_return"], "G")


def test_a_shuffle_state_from_another_device_restarts_from_the_seed_with_a_warning():
    """A GPU's minibatch shuffle generator is a CUDA one (Philox, 16 bytes of state); resuming
    its checkpoint on a CPU (Mersenne Twister, 5056 bytes) cannot restore it: the run goes on
    from the seed and says it will not match the uninterrupted one."""
    from distrl.runner.learner import restore_generator

    g = torch.Generator().manual_seed(3)
    fresh = g.get_state()
    with pytest.warns(UserWarning, match="saved on another device than this run's cpu"):
        restore_generator(g, torch.zeros(16, dtype=torch.uint8), "minibatch shuffle")
    assert torch.equal(g.get_state(), fresh)
    other = torch.Generator().manual_seed(4).get_state()
    restore_generator(g, other, "minibatch shuffle")  # same kind: restored, no warning
    assert torch.equal(g.get_state(), other)


def test_resume_of_a_recurrent_policy_equals_uninterrupted_run(tmp_path):
    """The LSTM's memory of every env (and which envs start an episode next) comes back from
    the checkpoint: episodes span the save, so without it the resumed rollouts differ."""

    def run(run_dir: Path, iterations: int, *extra: str) -> None:
        flags = [*SMALL, "--agent.save-interval", "3", "--agent.num-minibatches", "2"]
        flags += ["--agent.max-iterations", str(iterations), "--run-dir", str(run_dir)]
        run_training(parse_train_args(["cartpole-novel", *flags, *extra]))

    run(tmp_path / "full", 6)
    run(tmp_path / "run", 3)
    run(tmp_path / "run", 6, "--resume", "auto")
    full, resumed = final_state(tmp_path / "full", 6), final_state(tmp_path / "run", 6)
    assert "core.cell.weight_hh" in full["policy"]
    assert full["ranks"][0]["memory"].abs().sum() > 0
    assert_same(resumed["policy"], full["policy"], "policy")
    assert_same(resumed["ppo"], full["ppo"], "ppo")
    assert_same(resumed["ranks"][0]["memory"], full["ranks"][0]["memory"], "memory")


@pytest.mark.timeout(60)
def test_a_run_stopped_at_and_resumed_equals_one_with_its_linear_schedule(tmp_path):
    """--agent.stop-at pauses a run while its schedule spans --agent.max-iterations: the parts
    together are the whole run, the linear learning rate included (a population's member)."""
    linear = ("--agent.lr-schedule", "linear", "--agent.max-iterations", "4")
    train(tmp_path / "full", *linear)
    full = final_state(tmp_path / "full", 4)
    run_dir = tmp_path / "parts"
    for stop in ("1", "3", "4"):
        train(run_dir, *linear, "--agent.stop-at", stop, "--resume", "auto")
    assert [r["iteration"] for r in read_metrics(run_dir)] == [1, 2, 3, 4]
    assert_same(final_state(run_dir, 4)["policy"], full["policy"], "policy")
    assert [r["lr"] for r in read_metrics(run_dir)] == [
        r["lr"] for r in read_metrics(tmp_path / "full")
    ]


@pytest.mark.timeout(60)
def test_resume_of_a_path_continues_in_that_run_directory(tmp_path, capsys, monkeypatch):
    """`--config RUN/config.yaml --resume RUN` (no --run-dir) went on in a new runs/... dir,
    splitting the curves; it continues in RUN, as --resume auto --run-dir RUN does."""
    from tests.helpers import run_main

    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "first"
    train(run_dir, "--agent.max-iterations", "2")
    argv = ["train", "--config", str(run_dir / "config.yaml"), "--resume", str(run_dir)]
    code, out, err = run_main([*argv, "--agent.max-iterations", "4"], capsys)
    assert code == 0, out + err
    assert [r["iteration"] for r in read_metrics(run_dir)] == [1, 2, 3, 4]
    assert not (tmp_path / "runs").exists()
    ckpt_file = ckpt.list_checkpoints(run_dir / "checkpoints")[0]
    assert parse_train_args(["cartpole", "--resume", str(ckpt_file)]).run_dir == str(run_dir)
