"""Checkpoint save/load/discovery/resume: every way a checkpoint can be bad is refused, by name."""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import io
import json
import os
import random
import re
import shlex

import numpy as np
import pytest
import torch

from distrl import checkpoint as ck
from distrl import checkpoint_store as store  # the file store: where os.replace is called
from distrl.checkpoint import (
    SCHEMA_VERSION,
    CheckpointError,
    capture_rng_state,
    check_resume_compatible,
    checkpoint_path,
    config_hash,
    find_latest_valid,
    list_checkpoints,
    load_checkpoint,
    prune_checkpoints,
    remove_stale_temporaries,
    resolve_resume,
    restore_rng_state,
    save_checkpoint,
)
from distrl.config import PolicyConfig, TrainConfig, to_dict


def _meta(cfg: TrainConfig | None = None, world_size: int = 1) -> dict:
    cfg_dict = to_dict(cfg or TrainConfig())
    return {
        "config": cfg_dict,
        "config_hash": config_hash(cfg_dict),
        "world_size": world_size,
        "env_steps": 1234,
        "task": cfg_dict["task"],
    }


def _state(seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {
        "model": {"w": torch.randn(64, 32, generator=g), "b": torch.zeros(32)},
        "big": torch.full((8192,), 1.2345),
        "iteration": 7,
        "lr": 3e-4,
        "name": "cartpole",
        "history": [1, 2.5, "x", None, (3, 4)],
        "flags": {"done": True},
    }


def _rewrite_manifest(path, **changes) -> None:
    mpath = ck.manifest_path(path)
    manifest = json.loads(mpath.read_text())
    manifest.update(changes)
    manifest[ck.DIGEST_KEY] = ck.manifest_digest(manifest)  # the edit is not what is tested
    mpath.write_text(json.dumps(manifest))


# ---------------------------------------------------------------------------- save / load


def test_checkpoint_path_and_glob(tmp_path):
    assert checkpoint_path(tmp_path, 42) == tmp_path / "ckpt_00000042.pt"
    assert ck.checkpoint_iteration(tmp_path / "ckpt_00000042.pt") == 42
    assert ck.checkpoint_iteration(tmp_path / ".tmp-ckpt_00000042.pt.1.ab") is None


def test_round_trip(tmp_path):
    state = _state()
    path = save_checkpoint(tmp_path, 3, state, _meta())
    assert path == checkpoint_path(tmp_path, 3)
    loaded, manifest = load_checkpoint(path)
    assert loaded.keys() == state.keys()
    torch.testing.assert_close(loaded["model"], state["model"])
    torch.testing.assert_close(loaded["big"], state["big"])
    for k in ("iteration", "lr", "name", "history", "flags"):
        assert loaded[k] == state[k]
    assert manifest["file"] == path.name
    assert manifest["iteration"] == 3
    assert manifest["schema_version"] == SCHEMA_VERSION
    assert manifest["size"] == path.stat().st_size
    assert manifest["world_size"] == 1 and manifest["env_steps"] == 1234
    assert manifest["config"]["policy"]["actor_hidden"] == [64, 64]
    # No temp files survive a successful save.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt_00000003.json", "ckpt_00000003.pt"]


def test_meta_may_not_shadow_manifest_keys(tmp_path):
    with pytest.raises(ValueError, match="sha256"):
        save_checkpoint(tmp_path, 1, _state(), {"sha256": "x"})
    assert not list(tmp_path.iterdir())


def test_truncated_file(tmp_path):
    path = save_checkpoint(tmp_path, 1, _state(), _meta())
    full = path.stat().st_size
    path.write_bytes(path.read_bytes()[: full // 2])
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(path)
    msg = str(err.value)
    assert str(path) in msg and f"truncated: {full // 2} bytes, manifest says {full}" in msg


def test_empty_file(tmp_path):
    path = save_checkpoint(tmp_path, 1, _state(), _meta())
    path.write_bytes(b"")
    with pytest.raises(CheckpointError, match="empty file") as err:
        load_checkpoint(path)
    assert str(path) in str(err.value)


def test_bit_flip_inside_tensor_data_is_caught(tmp_path):
    state = _state()
    path = save_checkpoint(tmp_path, 1, state, _meta())
    raw = bytearray(path.read_bytes())
    storage = state["big"].numpy().tobytes()
    start = raw.find(storage)
    assert start >= 0, "tensor storage not found verbatim in the file"
    raw[start + len(storage) // 2] ^= 0x10
    path.write_bytes(bytes(raw))

    # Why the sha256 matters: torch alone loads the corrupted tensor without complaint.
    silently = torch.load(io.BytesIO(bytes(raw)), weights_only=True)
    assert (silently["big"] != state["big"]).sum() == 1

    with pytest.raises(CheckpointError, match="sha256 mismatch") as err:
        load_checkpoint(path)
    assert str(path) in str(err.value)


def test_missing_manifest(tmp_path):
    path = save_checkpoint(tmp_path, 1, _state(), _meta())
    ck.manifest_path(path).unlink()
    with pytest.raises(CheckpointError, match="missing manifest ckpt_00000001.json") as err:
        load_checkpoint(path)
    assert str(path) in str(err.value)


def test_unknown_schema_version(tmp_path):
    path = save_checkpoint(tmp_path, 1, _state(), _meta())
    _rewrite_manifest(path, schema_version=99)
    with pytest.raises(CheckpointError, match="schema version 99"):
        load_checkpoint(path)


def test_missing_file(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist") as err:
        load_checkpoint(tmp_path / "ckpt_00000001.pt")
    assert "ckpt_00000001.pt" in str(err.value)


def test_malicious_pickle_is_refused_without_running(tmp_path):
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {shlex.quote(str(marker))}",))

    # Write the payload as a "checkpoint" with a valid manifest, so size and sha256 pass and
    # the refusal has to come from weights_only=True.
    buf = io.BytesIO()
    torch.save({"model": Payload()}, buf)
    good = save_checkpoint(tmp_path, 1, {"placeholder": 0}, _meta())
    good.write_bytes(buf.getvalue())
    _rewrite_manifest(
        good,
        size=len(buf.getvalue()),
        sha256=hashlib.sha256(buf.getvalue()).hexdigest(),
    )

    with pytest.raises(CheckpointError, match="not loadable with weights_only=True") as err:
        load_checkpoint(good)
    assert str(good) in str(err.value)
    assert not marker.exists(), "the pickled payload ran"

    # Control: the payload is live, i.e. the test above proves something.
    torch.load(io.BytesIO(buf.getvalue()), weights_only=False)
    assert marker.exists()


def test_state_must_be_a_dict(tmp_path):
    path = save_checkpoint(tmp_path, 1, {"x": 1}, _meta())
    buf = io.BytesIO()
    torch.save([1, 2], buf)
    path.write_bytes(buf.getvalue())
    _rewrite_manifest(
        path,
        size=len(buf.getvalue()),
        sha256=hashlib.sha256(buf.getvalue()).hexdigest(),
    )
    with pytest.raises(CheckpointError, match="expected a dict"):
        load_checkpoint(path)


# ---------------------------------------------------------------- interrupted saves


def test_failed_data_replace_keeps_previous_checkpoint(tmp_path, monkeypatch):
    save_checkpoint(tmp_path, 1, _state(1), _meta())

    def boom(src, dst):
        raise OSError("simulated crash during os.replace")

    monkeypatch.setattr(store.os, "replace", boom)
    with pytest.raises(OSError, match="simulated crash"):
        save_checkpoint(tmp_path, 2, _state(2), _meta())
    monkeypatch.undo()

    path, skipped = find_latest_valid(tmp_path)
    assert path == checkpoint_path(tmp_path, 1) and skipped == []
    load_checkpoint(path)
    assert not any(p.name.startswith(".tmp-") for p in tmp_path.iterdir())


def test_crash_between_data_and_manifest_is_incomplete(tmp_path, monkeypatch):
    save_checkpoint(tmp_path, 1, _state(1), _meta())
    real_replace = os.replace
    calls = []

    def replace_then_die(src, dst):
        calls.append(dst)
        if str(dst).endswith(".json"):
            raise OSError("killed before the manifest landed")
        real_replace(src, dst)

    monkeypatch.setattr(store.os, "replace", replace_then_die)
    with pytest.raises(OSError):
        save_checkpoint(tmp_path, 2, _state(2), _meta())
    monkeypatch.undo()

    assert checkpoint_path(tmp_path, 2).exists()  # data landed, manifest did not
    path, skipped = find_latest_valid(tmp_path)
    assert path == checkpoint_path(tmp_path, 1)
    assert [(p.name, "missing manifest" in r) for p, r in skipped] == [("ckpt_00000002.pt", True)]


def test_killed_save_leaves_temp_files_that_discovery_ignores(tmp_path):
    save_checkpoint(tmp_path, 1, _state(1), _meta())
    # What a SIGKILL in the middle of writing iteration 2 leaves behind.
    (tmp_path / ".tmp-ckpt_00000002.pt.123.deadbeef").write_bytes(b"half a checkpoint")
    (tmp_path / ".tmp-ckpt_00000002.json.123.deadbeef").write_text("{")
    path, skipped = find_latest_valid(tmp_path)
    assert path == checkpoint_path(tmp_path, 1)
    assert skipped == []


def _kill_save_at(tmp_path, monkeypatch, iteration: int, suffix: str) -> None:
    """Run a save that dies when it renames its ``suffix`` file, leaving that temp file behind
    as a SIGKILL would (the clean-failure tidy-up, ``unlink``, is disabled)."""
    real_replace = os.replace

    def die_at(src, dst):
        if str(dst).endswith(suffix):
            raise OSError("killed")
        real_replace(src, dst)

    with monkeypatch.context() as m:
        m.setattr(store.os, "replace", die_at)
        m.setattr(type(tmp_path), "unlink", lambda self, missing_ok=False: None)
        with pytest.raises(OSError, match="killed"):
            save_checkpoint(tmp_path, iteration, _state(iteration), _meta())


def test_remove_stale_temporaries_removes_what_killed_saves_left(tmp_path, monkeypatch):
    save_checkpoint(tmp_path, 1, _state(1), _meta())
    _kill_save_at(tmp_path, monkeypatch, 2, ".pt")  # both written, died renaming the data file
    _kill_save_at(tmp_path, monkeypatch, 3, ".json")  # data landed, died renaming the manifest
    temps = sorted(p for p in tmp_path.iterdir() if p.name.startswith(".tmp-"))
    pid = os.getpid()
    assert [re.sub(r"\.[0-9a-f]{8}$", ".HEX", p.name) for p in temps] == [
        f".tmp-ckpt_00000002.json.{pid}.HEX",
        f".tmp-ckpt_00000002.pt.{pid}.HEX",
        f".tmp-ckpt_00000003.json.{pid}.HEX",
    ]
    (tmp_path / ".tmp-notes.txt").write_text("not ours")
    (tmp_path / ".tmp-ckpt_dir").mkdir()

    assert remove_stale_temporaries(tmp_path) == temps
    assert not any(p.exists() for p in temps)
    assert (tmp_path / ".tmp-notes.txt").exists() and (tmp_path / ".tmp-ckpt_dir").is_dir()
    assert find_latest_valid(tmp_path)[0] == checkpoint_path(tmp_path, 1)
    assert remove_stale_temporaries(tmp_path) == []
    assert remove_stale_temporaries(tmp_path / "missing") == []


def _names(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_prune_keeps_the_newest_and_deletes_manifests_too(tmp_path):
    for it in (1, 2, 3, 4, 5):
        save_checkpoint(tmp_path, it, _state(it), _meta())
    removed = prune_checkpoints(tmp_path, 2)
    assert removed == [checkpoint_path(tmp_path, it) for it in (3, 2, 1)]
    assert _names(tmp_path) == [
        "ckpt_00000004.json",
        "ckpt_00000004.pt",
        "ckpt_00000005.json",
        "ckpt_00000005.pt",
    ]
    assert prune_checkpoints(tmp_path, 2) == [] and prune_checkpoints(tmp_path, 10) == []
    for bad in (0, -1):
        with pytest.raises(ValueError, match="keep must be a positive int"):
            prune_checkpoints(tmp_path, bad)


def test_prune_never_removes_the_newest_valid_checkpoint(tmp_path):
    for it in (1, 2, 3, 4, 5):
        save_checkpoint(tmp_path, it, _state(it), _meta())
    newest = checkpoint_path(tmp_path, 5)
    newest.write_bytes(newest.read_bytes()[:100])  # truncated
    ck.manifest_path(checkpoint_path(tmp_path, 4)).unlink()  # unfinished save

    removed = prune_checkpoints(tmp_path, 2)
    assert removed == [checkpoint_path(tmp_path, it) for it in (2, 1)]
    assert list_checkpoints(tmp_path) == [checkpoint_path(tmp_path, it) for it in (5, 4, 3)]
    assert find_latest_valid(tmp_path)[0] == checkpoint_path(tmp_path, 3)
    load_checkpoint(checkpoint_path(tmp_path, 3))


def test_save_with_keep_prunes_after_each_save(tmp_path):
    for it in range(1, 7):
        save_checkpoint(tmp_path, it, _state(it), _meta(), keep=2)
        assert len(list_checkpoints(tmp_path)) == min(it, 2)
    assert list_checkpoints(tmp_path) == [checkpoint_path(tmp_path, it) for it in (6, 5)]
    assert len(list(tmp_path.glob("*.json"))) == 2
    # an older iteration saved again (a resume from an older checkpoint) survives its own save
    path = save_checkpoint(tmp_path, 3, _state(3), _meta(), keep=1)
    assert list_checkpoints(tmp_path) == [checkpoint_path(tmp_path, 6), path]


def test_save_with_bad_keep_writes_nothing(tmp_path):
    with pytest.raises(ValueError, match="keep must be a positive int"):
        save_checkpoint(tmp_path, 1, _state(1), _meta(), keep=0)
    assert _names(tmp_path) == []


def test_resave_same_iteration(tmp_path):
    save_checkpoint(tmp_path, 5, _state(1), _meta())
    path = save_checkpoint(tmp_path, 5, _state(2), _meta())
    loaded, _ = load_checkpoint(path)
    torch.testing.assert_close(loaded["model"]["w"], _state(2)["model"]["w"])


# --------------------------------------------------------------------------- discovery


def test_find_latest_valid_skips_corrupt_newest(tmp_path):
    for it in (1, 10, 20):
        save_checkpoint(tmp_path, it, _state(it), _meta())
    newest = checkpoint_path(tmp_path, 20)
    newest.write_bytes(newest.read_bytes()[:100])
    ck.manifest_path(checkpoint_path(tmp_path, 10)).unlink()
    (tmp_path / "ckpt_notanumber.pt").write_bytes(b"ignored")

    path, skipped = find_latest_valid(tmp_path)
    assert path == checkpoint_path(tmp_path, 1)
    assert [p.name for p, _ in skipped] == ["ckpt_00000020.pt", "ckpt_00000010.pt"]
    assert skipped[0][1].startswith("truncated: 100 bytes")
    assert skipped[1][1].startswith("missing manifest")


def test_find_latest_valid_orders_by_iteration(tmp_path):
    for it in (9, 100, 12):
        save_checkpoint(tmp_path, it, _state(it), _meta())
    assert find_latest_valid(tmp_path) == (checkpoint_path(tmp_path, 100), [])


def test_find_latest_valid_empty_or_missing_dir(tmp_path):
    assert find_latest_valid(tmp_path) == (None, [])
    assert find_latest_valid(tmp_path / "nope") == (None, [])


# ------------------------------------------------------------------------------ resume


def test_resolve_resume_file(tmp_path):
    path = save_checkpoint(tmp_path / "checkpoints", 4, _state(), _meta())
    assert resolve_resume(str(path), None) == (path, [])


def test_resolve_resume_run_dir_and_checkpoints_dir(tmp_path):
    ckdir = tmp_path / "checkpoints"
    save_checkpoint(ckdir, 4, _state(), _meta())
    newest = save_checkpoint(ckdir, 8, _state(), _meta())
    assert resolve_resume(str(tmp_path), None) == (newest, [])
    assert resolve_resume(str(ckdir), None) == (newest, [])


def test_resolve_resume_auto(tmp_path):
    # First start under torchrun: nothing yet -> fresh run.
    assert resolve_resume("auto", tmp_path) == (None, [])
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / ".tmp-ckpt_00000001.pt.1.ab").write_bytes(b"x")
    assert resolve_resume("auto", tmp_path) == (None, [])

    ckdir = tmp_path / "checkpoints"
    good = save_checkpoint(ckdir, 4, _state(), _meta())
    bad = save_checkpoint(ckdir, 8, _state(), _meta())
    bad.write_bytes(b"garbage")
    path, skipped = resolve_resume("auto", tmp_path)
    assert path == good
    assert [p for p, _ in skipped] == [bad]


def test_resolve_resume_auto_all_invalid_raises(tmp_path):
    ckdir = tmp_path / "checkpoints"
    a = save_checkpoint(ckdir, 4, _state(), _meta())
    b = save_checkpoint(ckdir, 8, _state(), _meta())
    a.write_bytes(b"")
    ck.manifest_path(b).unlink()
    with pytest.raises(CheckpointError) as err:
        resolve_resume("auto", tmp_path)
    msg = str(err.value)
    assert "none is valid" in msg and "from scratch" in msg
    assert "ckpt_00000004.pt: empty file" in msg
    assert "ckpt_00000008.pt: missing manifest" in msg


def test_resolve_resume_auto_without_run_dir_raises():
    with pytest.raises(CheckpointError, match="--run-dir"):
        resolve_resume("auto", None)


def test_resolve_resume_missing_path_raises(tmp_path):
    missing = tmp_path / "no_such_run"
    with pytest.raises(CheckpointError, match="does not exist") as err:
        resolve_resume(str(missing), None)
    assert str(missing) in str(err.value)


def test_resolve_resume_explicit_dir_without_checkpoints_raises(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoints to resume from"):
        resolve_resume(str(tmp_path), None)


def test_resolve_resume_explicit_dir_all_invalid_raises(tmp_path):
    path = save_checkpoint(tmp_path / "checkpoints", 1, _state(), _meta())
    path.write_bytes(b"junk")
    with pytest.raises(CheckpointError, match="none is valid"):
        resolve_resume(str(tmp_path), None)


# --------------------------------------------------------------------- compatibility


def _manifest(tmp_path, cfg: TrainConfig, world_size: int = 2) -> dict:
    path = save_checkpoint(tmp_path, 1, _state(), _meta(cfg, world_size))
    return load_checkpoint(path)[1]


def test_compatible_same_config_no_notes(tmp_path):
    cfg = TrainConfig()
    assert check_resume_compatible(_manifest(tmp_path, cfg), to_dict(cfg), 2) == []


def test_config_hash_stable_through_json():
    d = to_dict(TrainConfig())
    assert config_hash(d) == config_hash(json.loads(json.dumps(d)))
    safe = to_dict(TrainConfig(agent=dataclasses.replace(TrainConfig().agent, max_iterations=7)))
    assert config_hash(safe) == config_hash(d)
    other = to_dict(TrainConfig(task="pendulum"))
    assert config_hash(other) != config_hash(d)


def test_world_size_mismatch_refused(tmp_path):
    cfg = TrainConfig()
    with pytest.raises(CheckpointError) as err:
        check_resume_compatible(_manifest(tmp_path, cfg, world_size=4), to_dict(cfg), 2)
    msg = str(err.value)
    assert "ckpt_00000001.pt" in msg
    assert "world_size 4" in msg and "world_size 2" in msg and "re-split" in msg


def test_network_shape_mismatch_refused(tmp_path):
    cfg = TrainConfig()
    wider = dataclasses.replace(cfg, policy=dataclasses.replace(cfg.policy, actor_hidden=(128,)))
    with pytest.raises(CheckpointError) as err:
        check_resume_compatible(_manifest(tmp_path, cfg), to_dict(wider), 2)
    msg = str(err.value)
    assert "ckpt_00000001.pt" in msg
    assert "policy.actor_hidden: [64, 64] -> [128]" in msg
    assert "critic_hidden" not in msg


def test_all_problems_reported_together(tmp_path):
    cfg = TrainConfig()
    other = dataclasses.replace(cfg, task="pendulum")
    with pytest.raises(CheckpointError) as err:
        check_resume_compatible(_manifest(tmp_path, cfg, world_size=1), to_dict(other), 3)
    msg = str(err.value)
    assert 'task: "cartpole" -> "pendulum"' in msg and "world_size 1" in msg


def test_safe_change_returns_note(tmp_path):
    cfg = TrainConfig()
    longer = dataclasses.replace(
        cfg,
        agent=dataclasses.replace(cfg.agent, max_iterations=200),
        resume="auto",  # always differs on resume; not worth a note
    )
    notes = check_resume_compatible(_manifest(tmp_path, cfg), to_dict(longer), 2)
    assert notes == ["agent.max_iterations: 100 -> 200"]


def test_hash_mismatch_without_stored_config(tmp_path):
    cfg = TrainConfig()
    manifest = _manifest(tmp_path, cfg)
    del manifest["config"]
    assert check_resume_compatible(manifest, to_dict(cfg), 2) == []
    with pytest.raises(CheckpointError, match="stores no config"):
        check_resume_compatible(manifest, to_dict(dataclasses.replace(cfg, task="x")), 2)


def test_unknown_schema_refused_by_compat_check(tmp_path):
    cfg = TrainConfig()
    manifest = {**_manifest(tmp_path, cfg), "schema_version": 2}
    with pytest.raises(CheckpointError, match="schema version 2"):
        check_resume_compatible(manifest, to_dict(cfg), 2)


def test_checkpoint_error_pickles():
    import pickle

    err = pickle.loads(pickle.dumps(CheckpointError("/x/ckpt_00000001.pt", "sha256 mismatch")))
    assert str(err) == "checkpoint /x/ckpt_00000001.pt: sha256 mismatch"
    assert err.reason == "sha256 mismatch"


# --------------------------------------------------------------------------------- RNG


def _draw() -> tuple:
    return (
        torch.rand(5),
        torch.randn(3),
        np.random.rand(5),
        np.random.standard_normal(),  # exercises numpy's cached Gaussian
        random.random(),
        random.gauss(0.0, 1.0),  # exercises random's gauss_next
    )


def _assert_same(a: tuple, b: tuple) -> None:
    torch.testing.assert_close(a[0], b[0], rtol=0, atol=0)
    torch.testing.assert_close(a[1], b[1], rtol=0, atol=0)
    np.testing.assert_array_equal(a[2], b[2])
    assert a[3:] == b[3:]


def test_rng_capture_restore():
    torch.manual_seed(1)
    np.random.seed(1)
    random.seed(1)
    np.random.standard_normal()  # leave a cached Gaussian in numpy's state
    random.gauss(0.0, 1.0)
    state = capture_rng_state()
    first = _draw()
    _draw()  # move every generator on
    restore_rng_state(state)
    _assert_same(first, _draw())


def test_rng_state_round_trips_weights_only(tmp_path):
    torch.manual_seed(2)
    np.random.seed(2)
    random.seed(2)
    np.random.standard_normal()
    random.gauss(0.0, 1.0)
    path = save_checkpoint(tmp_path, 1, {"rng": capture_rng_state()}, _meta())
    first = _draw()
    _draw()
    loaded, _ = load_checkpoint(path)  # weights_only=True inside
    restore_rng_state(loaded["rng"])
    _assert_same(first, _draw())


def test_restore_rng_state_names_missing_parts():
    with pytest.raises(ValueError, match="numpy"):
        restore_rng_state({"torch": torch.get_rng_state(), "cuda": [], "python": {}})


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_rng_capture_restore(tmp_path):
    torch.cuda.manual_seed_all(3)
    torch.rand(1, device="cuda")  # initialise CUDA so its state is captured
    path = save_checkpoint(tmp_path, 1, {"rng": capture_rng_state()}, _meta())
    first = torch.rand(5, device="cuda")
    torch.rand(5, device="cuda")
    loaded, _ = load_checkpoint(path, map_location="cuda")
    assert loaded["rng"]["cuda"], "CUDA RNG state was not captured"
    restore_rng_state(loaded["rng"])
    torch.testing.assert_close(first, torch.rand(5, device="cuda"), rtol=0, atol=0)


def test_checkpoint_from_before_reward_scaling_still_resumes(tmp_path):
    # a manifest written before policy.reward_normalization existed: its config lacks the field
    cfg = TrainConfig()
    old = json.loads(json.dumps(to_dict(cfg)))
    del old["policy"]["reward_normalization"]
    manifest = _manifest(tmp_path, cfg)
    manifest["config"], manifest["config_hash"] = old, config_hash(old)
    assert manifest["config_hash"] == config_hash(to_dict(cfg))
    assert check_resume_compatible(manifest, to_dict(cfg), 2) == []
    # turning it on changes what the value head predicts: refused, naming the field
    scaled = dataclasses.replace(cfg, policy=PolicyConfig(reward_normalization=True))
    with pytest.raises(CheckpointError, match="policy.reward_normalization: <missing> -> true"):
        check_resume_compatible(manifest, to_dict(scaled), 2)


# ----------------------------------------------------------------- torch floor (finding 2)


def test_pyproject_requires_a_torch_whose_weights_only_is_safe():
    import tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    (torch_req,) = [r for r in project["dependencies"] if re.match(r"torch\b", r)]
    floor = re.fullmatch(r"torch>=(\d+)\.(\d+)", torch_req)
    assert floor, torch_req
    assert (int(floor.group(1)), int(floor.group(2))) >= ck.SAFE_TORCH == (2, 10)


@pytest.mark.parametrize("version", ["2.5.1", "2.9.1+cu126", "2.3.0"])
def test_an_older_torch_refuses_to_unpickle_a_checkpoint(tmp_path, monkeypatch, version):
    path = save_checkpoint(tmp_path, 1, _state(), _meta())
    calls = []
    monkeypatch.setattr(torch, "__version__", version)
    monkeypatch.setattr(torch, "load", lambda *a, **k: calls.append(a))
    with pytest.raises(CheckpointError, match=r"refusing to load a checkpoint with torch") as err:
        load_checkpoint(path)
    assert str(path) in str(err.value) and "torch>=2.10" in str(err.value)
    assert "CVE-2025-32434" in str(err.value)
    assert calls == []  # nothing was unpickled


def test_torch_release_parses_local_versions():
    assert ck.torch_release("2.13.0+cpu") == (2, 13)
    assert ck.torch_release("2.10.0a0+git123") == (2, 10)
    assert ck.torch_release("2.9.1") < ck.SAFE_TORCH <= ck.torch_release("2.10.0")


# ------------------------------------------------ saves that never lose the last good file


def _fail_fsync_of(monkeypatch, prefix: str, skip: int = 0) -> list[str]:
    """Make ``os.fsync`` of a file named ``prefix``... raise ENOSPC, after ``skip`` such calls
    succeeded (a disk that fills up while a save writes); return the names it failed on."""
    real_fsync = os.fsync
    seen: list[str] = []
    failed: list[str] = []

    def fsync(fd):
        name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        if name.startswith(prefix):
            seen.append(name)
            if len(seen) > skip:
                failed.append(name)
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return failed


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc/self/fd")
@pytest.mark.parametrize("skip", [0, 1], ids=["data-temp", "manifest-temp"])
def test_a_full_disk_while_resaving_best_keeps_the_previous_best(tmp_path, monkeypatch, skip):
    best = save_checkpoint(tmp_path, 3, _state(3), _meta(), name="best.pt")
    before = best.read_bytes(), ck.manifest_path(best).read_bytes()
    failed = _fail_fsync_of(monkeypatch, ".tmp-best.", skip=skip)
    with pytest.raises(OSError) as err:
        save_checkpoint(tmp_path, 5, _state(5), _meta(), name="best.pt")
    monkeypatch.undo()
    assert failed, "the fault was not injected"
    # the previous best.pt is untouched and loads; nothing is left behind
    assert (best.read_bytes(), ck.manifest_path(best).read_bytes()) == before
    assert load_checkpoint(best)[1]["iteration"] == 3
    assert _names(tmp_path) == ["best.json", "best.pt"]
    # one clear error naming the directory and the cause, and an OSError still
    assert isinstance(err.value, ck.CheckpointSaveError) and err.value.errno == errno.ENOSPC
    msg = str(err.value)
    assert f"could not save best.pt in {tmp_path}: " in msg, msg
    assert "No space left on device (ENOSPC)" in msg and "free some space" in msg, msg


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc/self/fd")
@pytest.mark.timeout(60)
def test_a_full_disk_at_a_periodic_save_ends_the_run_with_one_clear_error(tmp_path, monkeypatch):
    from tests.helpers import api_train

    failed = _fail_fsync_of(monkeypatch, ".tmp-ckpt_00000002.")
    with pytest.raises(OSError) as err:
        api_train("cartpole", tmp_path / "run", agent={"save_interval": 1, "max_iterations": 3})
    assert failed
    ckdir = tmp_path / "run" / "checkpoints"
    assert type(err.value).__name__ == "CheckpointSaveError", repr(err.value)
    assert str(err.value).startswith(f"could not save ckpt_00000002.pt in {ckdir}: No space")
    assert err.value.__cause__ is None  # one error, not a chain ending in a raw OSError
    assert find_latest_valid(ckdir)[0] == checkpoint_path(ckdir, 1)
    assert not [p for p in ckdir.iterdir() if p.name.startswith(".tmp-")]


def test_stale_temporaries_of_every_saved_file_are_swept_but_never_a_live_writers(tmp_path):
    import subprocess
    import sys

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        names = ["ckpt_00000002.pt", "ckpt_00000002.json", "best.pt", "best.json", "bc.pt"]
        names += ["avg_00000001-00000003.pt", "avg_00000001-00000003.json"]
        stale = [tmp_path / f".tmp-{n}.{dead.pid}.0badf00d" for n in names]
        alive = [tmp_path / f".tmp-{n}.{live.pid}.0badf00d" for n in names]
        for p in stale + alive:
            p.write_bytes(b"half a file")
        # a save of best.pt sweeps only what killed saves of best.pt left
        save_checkpoint(tmp_path, 4, _state(4), _meta(), name="best.pt")
        gone = {p.name for p in stale + alive if not p.exists()}
        assert gone == {f".tmp-best.pt.{dead.pid}.0badf00d", f".tmp-best.json.{dead.pid}.0badf00d"}
        # a sweep of the directory takes every dead writer's and no live writer's
        removed = remove_stale_temporaries(tmp_path)
        assert {p.name for p in removed} == {p.name for p in stale} - gone
        assert all(p.exists() for p in alive)
        assert not any(p.exists() for p in stale)
    finally:
        live.kill()
        live.wait()
    assert {p.name for p in remove_stale_temporaries(tmp_path)} == {p.name for p in alive}


def _saved_pair(tmp_path):
    import torch as _t

    from distrl import checkpoint_store as store

    for it in (1, 2):
        store.save_checkpoint(tmp_path, it, {"w": _t.ones(2) * it}, {"world_size": 1})
    return store, store.manifest_path(store.checkpoint_path(tmp_path, 2))


@pytest.mark.parametrize("edit, reason", [
    (lambda m: m.pop("manifest_sha256"), "lacks manifest_sha256"),
    (lambda m: m.update(iteration="2"), "wrong type: iteration (str, not int)"),
    (lambda m: m.update(size=[1]), "size (list, not int)"),
    (lambda m: m.update(world_size=True), "world_size (bool, not int)"),
])  # fmt: skip
def test_a_manifest_edited_out_of_shape_falls_back_to_the_previous_checkpoint(
    tmp_path, edit, reason
):
    """A manifest whose fields had the wrong types crashed --resume auto (TypeError), and one
    without its digest switched the integrity check off."""
    import json as _json

    store, mpath = _saved_pair(tmp_path)
    manifest = _json.loads(mpath.read_text())
    edit(manifest)
    mpath.write_text(_json.dumps(manifest))
    found, skipped = store.find_latest_valid(tmp_path)
    assert found == store.checkpoint_path(tmp_path, 1)
    assert len(skipped) == 1 and reason in skipped[0][1], skipped


def test_a_manifest_nested_past_the_parser_falls_back(tmp_path):
    store, mpath = _saved_pair(tmp_path)
    mpath.write_text('{"config": ' + "[" * 100_000 + "]" * 100_000 + "}")
    found, skipped = store.find_latest_valid(tmp_path)
    assert found == store.checkpoint_path(tmp_path, 1) and "unreadable manifest" in skipped[0][1]
