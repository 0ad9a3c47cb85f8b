"""Files are data, never code: a checkpoint's manifest is covered by its own digest, and a task
read from a file (a manifest, a run's config.yaml, a demonstrations file, a sweep's sweep.yaml)
never makes distrl import a module, nor does an ``--import`` in a sweep.yaml. And a run directory
is not trusted to hold regular files: nothing distrl writes in place follows a symbolic link out.

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


def _demos_file(path, suite: str) -> None:
    """A demonstrations file, well formed but for its suite (as someone crafting it would)."""
    import torch

    from distrl.demos import FORMAT, VERSION

    steps = {"obs": torch.zeros(1, 2, 3), "actions": torch.zeros(1, 2, 1)}
    episode = {"lengths": torch.ones(1, dtype=torch.long), "success": torch.ones(1, dtype=bool)}
    data = {"a": {**steps, **episode, "init_indices": torch.zeros(1, dtype=torch.long)}}
    demos = {"format": FORMAT, "version": VERSION, "suite": suite, "tasks": ["a"], "meta": {}}
    torch.save({**demos, "data": data}, path)


def test_a_demonstrations_file_naming_a_module_imports_nothing(tmp_path, monkeypatch, capsys):
    """Before the fix, the suite a demonstrations file names was resolved (``get_task``) while
    the file was checked: a ``gym:<module>:<Id>`` suite imported the module."""
    from distrl.cli import main
    from distrl.demos import load_demos

    task, marker = _module(tmp_path, "evildemos")
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "demos.pt"
    _demos_file(path, task)
    with pytest.raises(ValueError, match="which would import the Python module 'evildemos'") as e:
        load_demos(path)
    assert f"demonstrations file {path} names task '{task}'" in str(e.value)
    assert "DISTRL_IMPORT=evildemos" in str(e.value)  # the fix, named
    assert not marker.exists(), "the demonstrations file made distrl import a module"
    # nor from the command line: pretrain --demos reads the same file
    assert main(["pretrain", "reach10", "--demos", str(path)]) == 2
    assert not marker.exists(), "the demonstrations file made distrl import a module"
    assert "which would import the Python module 'evildemos'" in capsys.readouterr().err


def test_a_resumed_sweep_takes_no_import_from_its_file(tmp_path, monkeypatch, capsys):
    """Before the fix, ``distrl sweep --resume DIR`` imported the modules of an ``--import`` in
    DIR/sweep.yaml's overrides (and the module of a ``gym:<module>:<Id>`` task there)."""
    import yaml

    from distrl.args import IMPORTED
    from distrl.cli import main

    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)  # --import looks in the current directory first
    _, marker = _module(tmp_path, "evilsweep")
    settings = {"task": "cartpole", "space": None, "metric": "episode_return_mean", "last": 1,
                "direction": "maximize", "nproc": 1, "seed": 0, "pruner": "none",
                "prune_warmup": None}  # fmt: skip
    sweep_dir = tmp_path / "sweep"
    sweep_dir.mkdir()
    overrides = ["--import", "evilsweep", "--agent.max-iterations", "1"]
    (sweep_dir / "sweep.yaml").write_text(yaml.safe_dump({**settings, "overrides": overrides}))
    assert main(["sweep", "--resume", str(sweep_dir), "--trials", "1"]) == 2
    assert not marker.exists(), "sweep.yaml made distrl import a module"
    err = capsys.readouterr().err
    assert f"{sweep_dir / 'sweep.yaml'} names --import evilsweep" in err, err
    assert f"distrl sweep --resume {sweep_dir} --import evilsweep" in err, err
    assert not (sweep_dir / "trial_0").exists() and not (sweep_dir / "study.db").exists()
    # named on this command line, the module is imported and the sweep goes on (to the check
    # of --trials, which stops it before any trial)
    resume = ["sweep", "--resume", str(sweep_dir), "--import", "evilsweep", "--trials", "0"]
    before = list(IMPORTED)
    try:
        assert main(resume) == 2
    finally:
        IMPORTED[:] = before  # the later tests' resume commands name no --import of this one
    assert marker.exists()
    assert "--trials, --last and --parallel must be at least 1" in capsys.readouterr().err
    # a task there that would import a module: refused as any file's
    task, marker = _module(tmp_path, "evilsweeptask")
    (sweep_dir / "sweep.yaml").write_text(yaml.safe_dump({**settings, "task": task,
                                                          "overrides": []}))  # fmt: skip
    assert main(["sweep", "--resume", str(sweep_dir), "--trials", "1"]) == 2
    assert not marker.exists(), "sweep.yaml made distrl import a module"
    assert "which would import the Python module 'evilsweeptask'" in capsys.readouterr().err


# Nothing distrl writes follows a symbolic link out of the run directory: a run directory may be
# someone else's (copied, unpacked), and a link in it must not make distrl write elsewhere.


def _link(tmp_path, path):
    """Make ``path`` a symbolic link to a file outside its run directory; that file."""
    target = tmp_path / "outside" / "precious.txt"
    target.parent.mkdir(exist_ok=True)
    target.write_text("precious\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)
    return target


def test_a_lock_file_that_is_a_link_is_refused_its_target_untouched(tmp_path):
    """Before the fix, RunLock opened RUN/.lock through the link and truncated its target."""
    from distrl.rundir import LOCK_FILE, RunLock, check_unlocked

    run = tmp_path / "run"
    target = _link(tmp_path, run / LOCK_FILE)
    for take in (RunLock, check_unlocked):
        with pytest.raises(ValueError, match="is a symbolic link") as err:
            take(run)
        assert str(run / LOCK_FILE) in str(err.value) and "will not write" in str(err.value)
        assert target.read_text() == "precious\n"


def test_a_metrics_file_that_is_a_link_is_refused_its_target_untouched(tmp_path):
    """Before the fix, the telemetry appended the run's records to the link's target."""
    from distrl.telemetry import METRICS_FILE, Telemetry

    run = tmp_path / "run"
    target = _link(tmp_path, run / METRICS_FILE)
    with pytest.raises(ValueError, match="is a symbolic link") as err:
        sink = Telemetry.create(
            run, {"task": "cartpole"}, total_iterations=1, tensorboard=False, progress=False
        )
        sink.log({"iteration": 0, "env_steps": 1})
        sink.close()
    assert str(run / METRICS_FILE) in str(err.value)
    assert target.read_text() == "precious\n"


def test_export_metadata_that_is_a_link_is_refused_its_target_untouched(
    cartpole_checkpoint, tmp_path
):
    """Before the fix, export wrote its metadata sidecar (policy.pt.json) through the link."""
    from distrl.exporting import export_policy, sidecar

    out = tmp_path / "exported" / "policy.pt"
    target = _link(tmp_path, sidecar(out))
    with pytest.raises(ValueError, match="is a symbolic link") as err:
        export_policy(cartpole_checkpoint, "torchscript", out, check=False)
    assert str(sidecar(out)) in str(err.value)
    assert target.read_text() == "precious\n"


def test_sweep_and_population_files_that_are_links_are_never_written_through(tmp_path):
    """sweep.csv, sweep.yaml, a trial's config.yaml, play's --out, a population's state and
    settings, a member's config and its log: each was written in place, through a link there
    (to its target, outside the run directory)."""
    from distrl import population, sweep
    from distrl.safe_files import replace_text

    class Study:
        def get_trials(self, deepcopy=False):
            return []

    csv_link = tmp_path / "sweep" / "sweep.csv"
    target = _link(tmp_path, csv_link)
    with pytest.raises(ValueError, match="is a symbolic link"):
        sweep.write_csv(Study(), csv_link)
    assert target.read_text() == "precious\n"
    for name in ("sweep.yaml", "population.json", "pbt_config.yaml", "play.json"):
        link = tmp_path / "run" / name
        target = _link(tmp_path, link)
        replace_text(link, "new\n")  # how each is written: the link is replaced
        assert target.read_text() == "precious\n" and link.read_text() == "new\n"
        assert not link.is_symlink()
    log = tmp_path / "member_0" / "log.txt"
    target = _link(tmp_path, log)
    with pytest.raises(ValueError, match="is a symbolic link"):
        population.start_member(tmp_path / "member_0" / "pbt_config.yaml", [])
    assert target.read_text() == "precious\n"
