"""Files are data, never code: a checkpoint's manifest is covered by its own digest, and a task
read from a file (a manifest, a run's config.yaml) never makes distrl import a module.

A ``gym:<module>:<Id>`` task imports ``module`` (as ``gymnasium.make`` does); that is how a
user's own Gymnasium env is trained. On 5b5aa2a a manifest edited to name such a task made
``python -m distrl.cli play`` import a module from the current directory. Now the module must be
named where the command runs: the task on the command line, ``DISTRL_IMPORT``, or the caller's
own ``import``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from distrl import checkpoint as ck
from tests.helpers import api_train

# A module that leaves a marker when imported, and registers a Gymnasium id (so that a task
# naming it is a real task once the module is imported where the user asked for it).
EVIL = """
import pathlib
pathlib.Path({marker!r}).write_text("imported")
import gymnasium
gymnasium.register({env_id!r}, entry_point="gymnasium.envs.classic_control:CartPoleEnv")
"""


def _module(tmp_path, name: str) -> tuple[str, object]:
    marker = tmp_path / f"{name}.imported"
    env_id = f"{name.capitalize()}-v0"
    (tmp_path / f"{name}.py").write_text(EVIL.format(marker=str(marker), env_id=env_id))
    return f"gym:{name}:{env_id}", marker


def _edit_manifest(path, digest: bool, **config) -> None:
    """Edit the config a checkpoint's manifest carries (and its top-level task), recomputing its
    digest when ``digest`` (as someone crafting the file would)."""
    mpath = ck.manifest_path(path)
    manifest = json.loads(mpath.read_text())
    manifest["config"].update(config)
    if "task" in config:
        manifest["task"] = config["task"]
    if digest and hasattr(ck, "manifest_digest"):  # (5b5aa2a wrote no digest)
        manifest[ck.DIGEST_KEY] = ck.manifest_digest(manifest)
    mpath.write_text(json.dumps(manifest))


@pytest.fixture(scope="module")
def cartpole_checkpoint(tmp_path_factory):
    run = tmp_path_factory.mktemp("run")
    api_train("cartpole", run)
    return ck.find_latest_valid(run / "checkpoints")[0]


def _copy(path, tmp_path):
    out = tmp_path / path.name
    out.write_bytes(path.read_bytes())
    ck.manifest_path(out).write_bytes(ck.manifest_path(path).read_bytes())
    return out


def test_a_manifest_edited_after_it_was_written_is_refused(cartpole_checkpoint, tmp_path):
    path = _copy(cartpole_checkpoint, tmp_path)
    assert ck.load_checkpoint(path)[1]["config"]["task"] == "cartpole"
    assert ck.read_manifest(path)[ck.DIGEST_KEY] == ck.manifest_digest(ck.read_manifest(path))
    _edit_manifest(path, digest=False, seed=7)  # the data file is untouched: its sha256 holds
    for load in (ck.read_manifest, ck.load_checkpoint, ck.verify_checkpoint):
        with pytest.raises(ck.CheckpointError, match="was modified after it was written") as err:
            load(path)
        assert str(path) in str(err.value)


@pytest.mark.timeout(120)
def test_play_of_a_manifest_naming_a_module_imports_nothing(cartpole_checkpoint, tmp_path):
    task, marker = _module(tmp_path, "evilplay")
    path = _copy(cartpole_checkpoint, tmp_path)
    _edit_manifest(path, digest=True, task=task)
    # `python -m` puts the current directory, which holds the module, first on sys.path
    proc = subprocess.run(
        [sys.executable, "-m", "distrl.cli", "play", str(path), "--episodes", "1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert not marker.exists(), "the manifest made distrl import a module"
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = proc.stderr
    assert f"names task '{task}', which would import the Python module 'evilplay'" in err, err
    assert "DISTRL_IMPORT=evilplay" in err and "Traceback" not in err, err


def test_a_config_file_naming_a_module_imports_nothing(tmp_path, monkeypatch, capsys):
    from distrl.cli import main

    task, marker = _module(tmp_path, "evilyaml")
    monkeypatch.syspath_prepend(str(tmp_path))
    config = tmp_path / "config.yaml"
    config.write_text(f"task: '{task}'\n")
    argv = ["train", "--config", str(config), "--run-dir", str(tmp_path / "run")]
    assert main([*argv, "--agent.max-iterations", "1"]) == 2
    assert not marker.exists(), "the config file made distrl import a module"
    err = capsys.readouterr().err
    assert f"--config {config} names task '{task}', which would import" in err, err
    assert f"distrl train {task} ..." in err, err  # how to do it from the command line


def test_the_command_line_or_code_may_import_the_module(tmp_path, monkeypatch):
    from distrl.args import parse_train_args
    from distrl.envs.registry import check_task_from_file

    monkeypatch.syspath_prepend(str(tmp_path))
    # named on the command line: the config file then repeats it
    task, marker = _module(tmp_path, "evilcli")
    config = tmp_path / "config.yaml"
    config.write_text(f"task: '{task}'\n")
    assert parse_train_args([task, "--config", str(config)]).task == task
    assert marker.exists()
    # listed in DISTRL_IMPORT: a file may name it
    task, marker = _module(tmp_path, "evilenv")
    with pytest.raises(ValueError, match="which would import the Python module 'evilenv'"):
        check_task_from_file(task, "a file")
    monkeypatch.setenv("DISTRL_IMPORT", "other, evilenv")
    check_task_from_file(task, "a file")
    assert not marker.exists()  # the check imports nothing itself
    # imported by the caller's code
    task, marker = _module(tmp_path, "evilcode")
    __import__("evilcode")
    check_task_from_file(task, "a file")
    # tasks that import nothing always pass
    for name in ("cartpole", "gym:CartPole-v1", None, 3):
        check_task_from_file(name, "a file")
