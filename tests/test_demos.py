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


def test_noise_injection_records_the_experts_actions_on_a_perturbed_path():
    tasks = ("reach-east", "reach-north-heavy")
    clean = demos.make_demos("reach10", per_task=4, tasks=tasks)
    noisy = demos.make_demos("reach10", per_task=4, tasks=tasks, noise=0.5)
    again = demos.make_demos("reach10", per_task=4, tasks=tasks, noise=0.5)
    assert noisy["meta"]["noise"] == 0.5 and clean["meta"]["noise"] == 0.0
    for name in tasks:
        d, c = noisy["data"][name], clean["data"][name]
        for key, value in d.items():  # deterministic by seed
            assert torch.equal(again["data"][name][key], value), (name, key)
        real = torch.arange(d["obs"].shape[1]) < d["lengths"][:, None]
        # every recorded action is the expert's own at the recorded state ...
        obs, actions = d["obs"][real], d["actions"][real]
        assert torch.allclose(demos.reach_expert(obs).clamp(-1, 1), actions, atol=1e-6)
        # ... and the path is not the expert's: the states differ from the noise-free demos'
        T = min(int(d["lengths"].min()), int(c["lengths"].min()))
        assert not torch.allclose(d["obs"][:, 1:T], c["obs"][:, 1:T], atol=1e-3)
        assert bool(d["success"].all())  # (with retries)
        assert d["init_indices"].tolist() == c["init_indices"].tolist()
    assert "N(0, 0.5^2) action noise" in demos.summary(noisy)
    with pytest.raises(ValueError, match=r"--noise -0.1: .*\[0, 2\]"):
        demos.make_demos("reach10", per_task=1, noise=-0.1)


def test_noise_retries_the_starts_where_the_expert_failed(monkeypatch):
    def make(retries):
        monkeypatch.setattr(demos, "NOISE_RETRIES", retries)
        return demos.make_demos(  # (a 22-step limit: the noise-free expert takes 6-25 steps)
            "reach10", per_task=12, tasks=("reach-far-north-gate",), noise=1.0,
            max_episode_steps=22,
        )  # fmt: skip

    once, retried = make(0)["data"]["reach-far-north-gate"], make(10)
    d = retried["data"]["reach-far-north-gate"]
    assert 0 < int(once["success"].sum()) < 12  # noise and a short limit: the expert fails some
    assert int(d["success"].sum()) > int(once["success"].sum())
    assert d["init_indices"].tolist() == list(range(12))  # each start kept its slot
    for e in range(12):
        if bool(once["success"][e]):  # kept from the first attempt
            assert torch.equal(d["obs"][e], once["obs"][e])
        else:  # retried: another path from the same start
            assert torch.equal(d["obs"][e, 0], once["obs"][e, 0])
            assert not torch.equal(d["obs"][e], once["obs"][e])


# ---------------------------------------------- damaged and foreign files, atomic saves


@pytest.fixture(scope="module")
def small_demos():
    return demos.make_demos("reach10", per_task=2, tasks=("reach-east", "reach-west"))


def _refused(path, *needles):
    with pytest.raises(ValueError) as err:
        demos.load_demos(path)
    msg = str(err.value)
    assert f"demonstrations file {path}: " in msg, msg
    for needle in needles:
        assert needle in msg, msg
    return msg


def test_unreadable_demonstration_files_are_refused_naming_the_file(tmp_path, small_demos):
    import os
    import shlex

    good = demos.save_demos(small_demos, tmp_path / "good.pt")
    # truncated (a copy cut short): torch raises a RuntimeError from its zip reader
    cut = tmp_path / "cut.pt"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    _refused(cut, "not a readable demonstrations file", "truncated")
    # not a torch file at all
    (tmp_path / "junk.pt").write_bytes(b"just some text")
    _refused(tmp_path / "junk.pt", "not a readable demonstrations file")
    # a pickle with code in it: refused by weights_only, nothing runs
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {shlex.quote(str(marker))}",))

    torch.save({"format": demos.FORMAT, "payload": Payload()}, tmp_path / "evil.pt")
    _refused(tmp_path / "evil.pt", "UnpicklingError")
    assert not marker.exists()


def test_incomplete_or_misshapen_demonstrations_are_refused(tmp_path, small_demos):
    import copy

    def write(name, edit):
        d = copy.deepcopy(small_demos)
        edit(d)
        torch.save(d, tmp_path / name)
        return tmp_path / name

    # missing keys (a KeyError 'tasks' before)
    header = {"format": demos.FORMAT, "version": demos.VERSION}
    torch.save(header, tmp_path / "bare.pt")
    _refused(tmp_path / "bare.pt", "lacks suite, tasks, meta, data")
    _refused(write("nodata.pt", lambda d: d["data"].pop("reach-west")), "reach-west", "no data")
    _refused(
        write("nolen.pt", lambda d: d["data"]["reach-east"].pop("lengths")),
        "task reach-east: lacks the tensors lengths",
    )

    # shapes that do not fit each other
    def flat(d):
        d["data"]["reach-east"]["obs"] = d["data"]["reach-east"]["obs"][:, 0]

    _refused(write("flat.pt", flat), "task reach-east: shapes")

    def long(d):
        d["data"]["reach-west"]["lengths"][0] = 10_000

    _refused(write("long.pt", long), "episode lengths outside")

    # consistent in itself, but not the suite's sizes or tasks
    def narrow(d):
        for t in d["tasks"]:
            d["data"][t]["obs"] = d["data"][t]["obs"][..., :-1]

    D = small_demos["data"]["reach-east"]["obs"].shape[2]
    _refused(
        write("narrow.pt", narrow),
        f"observations of size {D - 1}",
        f"reach10 has {D}",
        "distrl demos reach10",
    )

    def foreign(d):
        d["tasks"] = ["reach-east", "push-far"]
        d["data"]["push-far"] = d["data"].pop("reach-west")

    _refused(write("foreign.pt", foreign), "push-far are not in the reach10 suite")


def test_save_demos_is_atomic(tmp_path, small_demos, monkeypatch):
    path = demos.save_demos(small_demos, tmp_path / "d.pt")
    before = path.read_bytes()
    real_save = torch.save

    def dies_halfway(obj, f, *args, **kwargs):
        real_save({"format": demos.FORMAT}, f)  # a few bytes land, then the process is gone
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", dies_halfway)
    with pytest.raises(OSError):
        demos.save_demos(small_demos, path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.pt"]
    assert demos.load_demos(path)["tasks"] == ["reach-east", "reach-west"]
