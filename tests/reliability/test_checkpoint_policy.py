"""Resume compatibility through the command line (`cli.train_main`, the `train` console script,
in this process): a resume that cannot be honoured is refused before anything starts, naming the
field or the world sizes; a resume that changes only safe fields runs and says what changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from distrl import checkpoint as ckpt
from distrl import cli
from tests.helpers import refuse_to_start, run_main, tiny_train_args

ARGS = ["cartpole", *tiny_train_args(8, num_epochs=1, num_minibatches=2)]


@pytest.fixture(scope="module")
def one_rank_run(tmp_path_factory) -> Path:
    """A finished single-process run of 2 iterations (checkpoint 2)."""
    run_dir = tmp_path_factory.mktemp("one_rank") / "run"
    assert cli.train_main([*ARGS, "--agent.max-iterations", "2", "--run-dir", str(run_dir)]) == 0
    return run_dir


@pytest.fixture
def nothing_starts(monkeypatch):
    refuse_to_start(monkeypatch, "an incompatible resume reached torchrun or the process group")


@pytest.mark.timeout(30)
def test_resume_with_another_network_shape_is_refused_naming_the_field(
    one_rank_run, tmp_path, capsys, nothing_starts
):
    new_dir = tmp_path / "new"
    code, _, err = run_main(
        [
            "train",
            *ARGS,
            "--run-dir",
            str(new_dir),
            "--resume",
            str(one_rank_run),
            "--policy.actor-hidden",
            "32",
            "32",
        ],
        capsys,
    )
    assert code == 2, err
    assert "ckpt_00000002.pt" in err and "cannot resume" in err, err
    assert "policy.actor_hidden: [64, 64] -> [32, 32]" in err, err
    assert "use the original values, or start a new run" in err, err
    assert not new_dir.exists()


@pytest.mark.timeout(30)
def test_resume_with_two_ranks_from_a_one_rank_checkpoint_is_refused(
    one_rank_run, tmp_path, capsys, nothing_starts
):
    new_dir = tmp_path / "new"
    code, _, err = run_main(
        [
            "train",
            *ARGS,
            "--nproc",
            "2",
            "--run-dir",
            str(new_dir),
            "--resume",
            str(one_rank_run / "checkpoints" / "ckpt_00000002.pt"),
        ],
        capsys,
    )
    assert code == 2, err
    assert "saved with world_size 1, resuming with world_size 2" in err, err
    assert "resume with 1 processes, or start a new run" in err, err
    assert not new_dir.exists()


@pytest.mark.timeout(60)
def test_resume_changing_max_iterations_is_allowed_and_logged(one_rank_run, tmp_path, capsys):
    # a copy: the module's run must stay at checkpoint 2 for the other tests
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(one_rank_run, run_dir)
    code, out, err = run_main(
        ["train", *ARGS, "--agent.max-iterations", "3", "--run-dir", str(run_dir)]
        + ["--resume", "auto"],
        capsys,
    )
    assert code == 0, out + err
    assert "resume: loaded" in out and "at iteration 2" in out, out
    assert "resume: changed agent.max_iterations: 2 -> 3" in out, out
    assert ckpt.verify_checkpoint(ckpt.checkpoint_path(run_dir / "checkpoints", 3))
