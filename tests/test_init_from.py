"""`train --init-from`: a new run that starts from another run's policy (weights and normalizer),
exactly; refused before anything starts when that policy cannot fit; a checkpoint of the run
itself (a restart's --resume auto) wins over it."""

from __future__ import annotations

from pathlib import Path

import pytest

import distrl
from distrl import checkpoint as ckpt
from tests.helpers import assert_same, run_main, tiny_train_args

pytestmark = pytest.mark.timeout(120)

ARGS = tiny_train_args(16, max_iterations=2)


class FirstPolicy(distrl.Hooks):
    """The policy's state when the first update begins."""

    def __init__(self) -> None:
        self.state: dict | None = None

    def before_update(self, runner) -> None:
        if self.state is None:
            self.state = {k: v.clone() for k, v in runner.policy.state_dict().items()}


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    from distrl import cli

    run = tmp_path_factory.mktemp("source") / "run"
    assert cli.main(["train", "cartpole", "--run-dir", str(run), *ARGS]) == 0
    return run


def test_the_run_starts_from_exactly_that_policy(source, tmp_path, capsys):
    hook = FirstPolicy()  # passed to the runner through the API's hooks=
    cfg = distrl.make_config(
        "cartpole", "--init-from", str(source), "--run-dir", str(tmp_path / "r"), *ARGS
    )
    capsys.readouterr()
    distrl.train(cfg, hooks=[hook])
    out = capsys.readouterr().out
    assert "init: policy from" in out and "ckpt_00000002.pt" in out
    want, _ = ckpt.load_checkpoint(ckpt.checkpoint_path(source / "checkpoints", 2))
    assert hook.state is not None
    assert_same(hook.state, want["policy"], "policy at the first update")
    assert ckpt.read_manifest(ckpt.list_checkpoints(tmp_path / "r" / "checkpoints")[0])[
        "iteration"
    ] == 2  # fmt: skip


@pytest.mark.parametrize(
    "extra, message",
    [
        (["pendulum"], "its task is cartpole, this run's pendulum"),
        (["cartpole", "--policy.actor-hidden", "32", "32"], "--policy.actor-hidden (64, 64) there"),
        (["cartpole", "--resume", "SRC"], "contradict each other"),
    ],
)
def test_a_policy_that_cannot_fit_is_refused_before_anything_starts(
    source, tmp_path, capsys, extra, message
):
    argv = ["train", *[str(source) if w == "SRC" else w for w in extra]]
    argv += ["--init-from", str(source), "--run-dir", str(tmp_path / "r"), *ARGS]
    code, _, err = run_main(argv, capsys)
    assert code == 2 and message in err and "Traceback" not in err, err
    assert not (tmp_path / "r").exists()
    code, _, err = run_main(["train", "cartpole", "--init-from", str(tmp_path / "nope")], capsys)
    assert code == 2 and "no such run directory or checkpoint" in err


def test_a_checkpoint_of_the_run_itself_wins(source, tmp_path, capsys):
    run = ["train", "cartpole", "--init-from", str(source), "--run-dir", str(tmp_path / "r")]
    code, out, _ = run_main([*run, "--resume", "auto", *ARGS], capsys)
    assert code == 0 and "init: policy from" in out  # nothing to resume yet: init applies
    code, out, _ = run_main([*run, "--resume", "auto", *ARGS, "--agent.max-iterations", "3"],
                            capsys)  # fmt: skip
    assert code == 0 and "resume: loaded" in out and "init: policy" not in out


NORMALIZER = ("normalizer.count", "normalizer.mean64", "normalizer.m2")


@pytest.mark.parametrize("mode", ["frozen", "updated"])
def test_the_normalizer_stays_as_that_policy_had_it_unless_asked(source, tmp_path, capsys, mode):
    run = tmp_path / "r"
    argv = ["train", "cartpole", "--init-from", str(source), "--run-dir", str(run), *ARGS]
    code, _, err = run_main([*argv, "--init-normalizer", mode], capsys)
    assert code == 0, err
    want, _ = ckpt.load_checkpoint(ckpt.checkpoint_path(source / "checkpoints", 2))
    got, _ = ckpt.load_checkpoint(ckpt.checkpoint_path(run / "checkpoints", 2))
    same = [bool((got["policy"][k] == want["policy"][k]).all()) for k in NORMALIZER]
    assert same == ([True] * 3 if mode == "frozen" else [False] * 3)
    assert got["policy"]["actor.0.weight"].ne(want["policy"]["actor.0.weight"]).any()  # trained
    code, _, err = run_main(["train", "cartpole", "--init-normalizer", "updated"], capsys)
    assert code == 2 and "applies to a run started with --init-from" in err
