"""Demonstrations: reach10's scripted expert succeeds from every shipped init state, and a
demonstrations file round-trips and is refused when it is not one."""

from __future__ import annotations

import pytest
import torch

from distrl import demos
from distrl.envs.reach import NUM_INIT_STATES
from tests.helpers import run_main


def test_reach_expert_succeeds_from_every_shipped_init_state():
    d = demos.make_demos("reach10", per_task=NUM_INIT_STATES)
    assert len(d["tasks"]) == 10
    for name in d["tasks"]:
        data = d["data"][name]
        assert bool(data["success"].all()), (name, data["success"].float().mean())
        assert torch.equal(data["init_indices"].sort().values, torch.arange(NUM_INIT_STATES))


def test_file_round_trip_and_steps(tmp_path):
    d = demos.make_demos("reach10", per_task=3, tasks=("reach-east", "reach-west"), first_init=4)
    path = demos.save_demos(d, tmp_path / "d.pt")
    back = demos.load_demos(path)
    assert back["tasks"] == ["reach-east", "reach-west"] and back["meta"]["first_init"] == 4
    for name in back["tasks"]:
        for key, value in d["data"][name].items():
            assert torch.equal(back["data"][name][key], value), (name, key)
        assert back["data"][name]["init_indices"].tolist() == [4, 5, 6]
    obs, actions, used = demos.demo_steps(back)
    steps = sum(int(back["data"][n]["lengths"].sum()) for n in back["tasks"])
    assert obs.shape == (steps, back["meta"]["obs_dim"]) and actions.shape[0] == steps
    assert used == {"reach-east": 3, "reach-west": 3}
    assert float(actions.abs().max()) <= 1.0


def test_bad_files_and_arguments_are_refused(tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        demos.load_demos(tmp_path / "missing.pt")
    torch.save({"format": "something-else"}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a distrl demonstrations file"):
        demos.load_demos(tmp_path / "other.pt")
    torch.save({"format": demos.FORMAT, "version": 99}, tmp_path / "new.pt")
    with pytest.raises(ValueError, match="version 99"):
        demos.load_demos(tmp_path / "new.pt")
    with pytest.raises(ValueError, match="the task has 50"):
        demos.make_demos("reach10", per_task=3, first_init=NUM_INIT_STATES - 1)


def test_cli(tmp_path, capsys):
    out = tmp_path / "r.pt"
    code, stdout, _ = run_main(["demos", "reach10", "--per-task", "2", "--out", str(out)], capsys)
    assert code == 0 and out.is_file() and "reach-east" in stdout and "success 2/2" in stdout
    code, _, stderr = run_main(["demos", "cartpole", "--out", str(tmp_path / "x.pt")], capsys)
    assert code == 2 and "not an episodic suite with an expert" in stderr
    assert "Traceback" not in stderr


def test_metaworld_expert_succeeds_on_reach(tmp_path):
    pytest.importorskip("metaworld", reason="needs the metaworld extra")
    d = demos.make_demos("metaworld-mt10", per_task=2, tasks=("reach-v3",))
    assert bool(d["data"]["reach-v3"]["success"].all())
