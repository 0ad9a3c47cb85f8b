"""`distrl average`: the averaged checkpoint holds the exact mean of the window's weights (the
newest normalizer), averaging copies of one policy gives that policy bit for bit, the file
plays, exports and initializes a run but is never resumed, and wrong windows or mixed runs are
refused with the fix."""

from __future__ import annotations

import shutil

import pytest
import torch

import distrl
from distrl import averaging
from distrl import checkpoint as ckpt
from tests.helpers import api_train, run_main

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("pendulum")
    api_train("pendulum", run_dir, 8, {"max_iterations": 4, "save_interval": 1})
    return run_dir


def _policy(path) -> dict[str, torch.Tensor]:
    return ckpt.load_checkpoint(path)[0]["policy"]


def test_the_average_is_the_mean_of_the_window_with_the_newest_normalizer(run, capsys):
    code, out, err = run_main(["average", str(run)], capsys)
    assert code == 0, err
    path = run / "checkpoints" / "avg_2-4.pt"  # default window: from 2/3 of the newest (4)
    assert f"averaged 3 checkpoints (iterations 2, 3, 4) -> {path}" in out
    window = [_policy(ckpt.checkpoint_path(run / "checkpoints", i)) for i in (2, 3, 4)]
    averaged = _policy(path)
    assert averaged.keys() == window[-1].keys()
    moved = False
    for key, value in averaged.items():
        if key.startswith("normalizer."):
            assert torch.equal(value, window[-1][key])
            moved |= not torch.equal(window[0][key], window[-1][key])
        else:
            mean = torch.stack([w[key].double() for w in window]).mean(0).to(value.dtype)
            assert torch.equal(value, mean), key
    assert moved  # a running normalizer: the drift reported is that of real, different stats
    assert "normalizer: the newest's" in out
    assert not torch.equal(averaged["actor.0.weight"], window[-1]["actor.0.weight"])

    manifest = ckpt.read_manifest(path)
    assert manifest["policy_only"] and manifest["averaged_iterations"] == [2, 3, 4]
    assert manifest["iteration"] == 4 and manifest["task"] == "pendulum"
    assert path not in ckpt.list_checkpoints(run / "checkpoints")  # resume and pruning skip it


def test_averaged_file_plays_exports_and_initializes_but_never_resumes(run, capsys, tmp_path):
    path = distrl.average(run, 3, 4).path
    assert path.name == "avg_3-4.pt"
    code, out, err = run_main(["play", str(path), "--episodes", "2"], capsys)
    assert code == 0 and "iteration 4" in out, err
    policy, cfg = distrl.load_policy(path)
    assert cfg.task == "pendulum"
    assert torch.equal(policy.actor[0].weight.detach(), _policy(path)["actor.0.weight"])
    assert distrl.export(path, "torchscript", tmp_path / "avg.pt").max_abs_diff is not None
    code, _, err = run_main(["train", "pendulum", "--resume", str(path)], capsys)
    assert code == 2 and "holds only a policy" in err
    result = api_train("pendulum", tmp_path / "from_avg", 8, init_from=str(path))
    assert result.run_dir.is_dir()


def test_averaging_copies_of_one_policy_gives_that_policy_exactly(run, tmp_path):
    src = ckpt.checkpoint_path(run / "checkpoints", 4)
    copy = tmp_path / "copy" / src.name
    copy.parent.mkdir()
    shutil.copy(src, copy)
    shutil.copy(ckpt.manifest_path(src), ckpt.manifest_path(copy))
    result = averaging.average_checkpoints([src, copy], tmp_path / "same.pt")
    assert result.weight_spread == 0.0 and result.normalizer_drift == 0.0
    original, averaged = _policy(src), _policy(result.path)
    assert all(torch.equal(averaged[k], v) for k, v in original.items())


def test_wrong_windows_and_mixed_runs_are_refused_with_the_fix(run, tmp_path, capsys):
    with pytest.raises(ValueError, match=r"1 checkpoint\(s\) in iterations 4..4 .* 1, 2, 3, 4"):
        averaging.select(run, 4)
    with pytest.raises(ValueError, match="--from-iteration 3 is after --to-iteration 2"):
        averaging.select(run, 3, 2)
    with pytest.raises(ValueError, match="no ckpt_"):
        averaging.select(tmp_path)
    files = [str(ckpt.checkpoint_path(run / "checkpoints", i)) for i in (3, 4)]
    with pytest.raises(ValueError, match="with checkpoint files named, drop them"):
        distrl.average(files, from_iteration=3)
    with pytest.raises(ValueError, match="named twice"):
        averaging.average_checkpoints([files[0], files[0]])
    with pytest.raises(ValueError, match="resume would take it for a training checkpoint"):
        averaging.average_checkpoints(files, tmp_path / "ckpt_00000009.pt")
    other = tmp_path / "cartpole"
    api_train("cartpole", other, 8, {"max_iterations": 1})
    code, _, err = run_main(
        ["average", files[1], str(ckpt.checkpoint_path(other / "checkpoints", 1))], capsys
    )
    assert code == 2 and "average checkpoints of one run" in err
    code, _, err = run_main(["average", files[1]], capsys)
    assert code == 2 and "not a run directory" in err


def test_a_run_saved_twice_averages_its_two_checkpoints(tmp_path, capsys):
    """`make train`'s run saves at iterations 50 and 100: the default window (the last third)
    holds one, so the newest two are averaged rather than refused."""
    api_train("cartpole", tmp_path, 8, {"max_iterations": 6, "save_interval": 3})
    chosen = averaging.select(tmp_path)
    assert [ckpt.checkpoint_iteration(p) for p in chosen] == [3, 6]
    code, out, err = run_main(["average", str(tmp_path)], capsys)
    assert code == 0, err
