"""The command line: `distrl list|train|play`, its errors and its usage text.

Most cases call ``distrl.cli.main`` in this process (a fresh interpreter costs seconds of
imports); one runs the installed console script to prove the entry points exist and exit right.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from distrl.config import EnvConfig
from distrl.envs.registry import default_config
from tests.helpers import BIN, run_main, tiny_train_args

pytestmark = pytest.mark.timeout(60)

SMALL = tiny_train_args(32)


def test_list_console_script_prints_builtin_tasks():
    proc = subprocess.run(
        [str(BIN / "distrl"), "list"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"COLUMNS": "500", "PATH": str(BIN)},
    )
    assert proc.returncode == 0, proc.stderr
    for task in ("cartpole", "acrobot", "pendulum", "gym:CartPole-v1"):
        assert re.search(rf"^\W*{re.escape(task)}\s", proc.stdout, re.M), proc.stdout
    # the one install recipe, brackets and all (not read as rich markup)
    assert "pip install -c constraints.txt -e '.[<extra>]'" in proc.stdout, proc.stdout


def test_list_is_one_line_a_task_at_80_columns(capsys, monkeypatch):
    from distrl.envs.registry import list_tasks

    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run_main(["list"], capsys)
    names = [t.name for t in list_tasks()]
    rows = [line for line in out.splitlines() if line.split(" ", 1)[0] in names]
    assert code == 0 and len(rows) == len(names) and all(len(r) <= 80 for r in rows)
    code, out, _ = run_main(["list", "--long"], capsys)
    assert code == 0 and all(t.description in out for t in list_tasks())


def test_usage(capsys):
    code, out, _ = run_main([], capsys)
    assert code == 2 and "usage: distrl <command>" in out
    code, out, _ = run_main(["--help"], capsys)
    assert code == 0 and "train <task> [overrides]" in out and "play" in out
    code, out, err = run_main(["frobnicate"], capsys)
    assert code == 2 and "unknown command 'frobnicate'" in err


def test_train_help(capsys):
    code, out, _ = run_main(["train", "--help"], capsys)
    assert code == 0 and "usage: train <task> [overrides]" in out
    code, out, _ = run_main(["train", "cartpole", "--help"], capsys)
    assert code == 0, out
    assert "usage: train cartpole" in out
    flags = "--env.num-envs --agent.num-epochs --agent.num-minibatches --nproc --resume"
    for flag in [*flags.split(), "--dist.timeout"]:
        assert flag in out, flag
    # the task's tuned defaults are the ones shown, not EnvConfig's
    n = default_config("cartpole").env.num_envs
    assert n != EnvConfig().num_envs
    assert re.search(rf"--env\.num-envs INT.*?\(default: {n}\)", out, re.S), out


def test_train_without_task_is_a_usage_error(capsys):
    code, _, err = run_main(["train"], capsys)
    assert code == 2 and "usage: train <task>" in err


def test_unknown_task_suggests_the_close_match(capsys):
    code, out, err = run_main(["train", "cartpol"], capsys)
    assert code == 2, out + err
    assert "unknown task 'cartpol'" in err
    assert re.search(r"Did you mean cartpole\b", err), err
    assert "distrl list" in err


def test_bad_override_value_is_a_clear_tyro_error(capsys):
    code, out, err = run_main(["train", "cartpole", "--agent.num-epochs", "abc"], capsys)
    assert code != 0
    text = out + err
    assert "--agent.num-epochs" in text and "'abc'" in text, text
    assert "Traceback" not in text


def test_unknown_override_is_an_error(capsys):
    code, out, err = run_main(["train", "cartpole", "--agent.num-epoch", "3"], capsys)
    assert code != 0
    assert "--agent.num-epoch" in out + err


@pytest.mark.parametrize(
    "flag, meant",
    [
        ("--agent.lr", "--agent.learning-rate"),  # its words' initials (not --agent.lr-schedule)
        ("--total-timesteps", "--agent.total-timesteps"),  # the name, in its section
        ("--agent.n-steps", "--agent.num-steps"),  # Stable-Baselines3's spelling
        ("--agent.ent", "--agent.ent-coef"),  # the name's first word
    ],
)
def test_an_unknown_flag_suggests_by_its_last_dotted_part(capsys, flag, meant):
    code, out, err = run_main(["train", "cartpole", flag, "1"], capsys)
    assert code == 2 and f"error: unknown option {flag}; did you mean {meant}" in err, out + err


def test_invalid_config_names_the_field_and_value(capsys, tmp_path):
    run_dir = tmp_path / "run"
    code, out, err = run_main(
        ["train", "cartpole", "--agent.num-minibatches", "0", "--run-dir", str(run_dir)], capsys
    )
    assert code == 2, out + err
    assert "invalid configuration" in err
    assert "--agent.num-minibatches must be positive, got 0" in err, err
    assert "Traceback" not in err
    assert not run_dir.exists()


def test_indivisible_batch_names_the_numbers(capsys):
    code, _, err = run_main(
        shlex.split(
            "train cartpole --env.num-envs 3 --agent.num-steps 5 --agent.num-minibatches 4"
        ),
        capsys,
    )
    assert code == 2
    assert "3 envs x 5 steps = 15" in err and "--agent.num-minibatches 4" in err, err


def test_play_after_short_training_prints_mean_and_std(capsys, tmp_path):
    run_dir = tmp_path / "run"
    code, out, err = run_main(
        ["train", "cartpole", *SMALL, "--agent.max-iterations", "2", "--run-dir", str(run_dir)],
        capsys,
    )
    assert code == 0, out + err
    assert (run_dir / "checkpoints" / "ckpt_00000002.pt").is_file()

    code, out, err = run_main(["play", str(run_dir), "--episodes", "3"], capsys)
    assert code == 0, out + err
    m = re.search(r"cartpole: 3 episodes, return (-?[\d.]+) ± ([\d.]+)", out)
    assert m, out
    mean, std = float(m.group(1)), float(m.group(2))
    assert 1.0 <= mean <= 500.0 and std >= 0.0
    assert "iteration 2" in out

    # a checkpoint file works too, and a bad episode count is an error, not a crash
    ck = run_dir / "checkpoints" / "ckpt_00000002.pt"
    code, out, _ = run_main(["play", str(ck), "--episodes", "2"], capsys)
    assert code == 0 and "2 episodes, return" in out
    code, _, err = run_main(["play", str(run_dir), "--episodes", "0"], capsys)
    assert code == 2 and "--episodes must be at least 1" in err


def test_version_is_the_package_s():
    import contextlib
    import io

    from distrl import __version__
    from distrl.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["--version"]) == 0
    assert out.getvalue().strip() == f"distrl {__version__}"


def test_play_and_export_load_a_run_of_a_task_that_import_registers(capsys, tmp_path):
    """A task of the user's own module (``register_task``) trains with ``--import MODULE``; its
    run plays and exports with the same flag, and without it the error names the flag."""
    import tests.fixtures.slow  # noqa: F401 (registers slow-cartpole here, for the training)

    run_dir = tmp_path / "run"
    code, out, err = run_main(
        [
            "train",
            "slow-cartpole",
            *SMALL,
            "--agent.max-iterations",
            "2",
            "--run-dir",
            str(run_dir),
        ],
        capsys,
    )
    assert code == 0, out + err
    root = Path(__file__).resolve().parents[1]  # where `tests.fixtures.slow` imports from

    def distrl(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(BIN / "distrl"), *args], cwd=root, capture_output=True, text=True, timeout=60
        )

    bare = distrl("play", str(run_dir), "--episodes", "2")
    assert bare.returncode == 2 and "unknown task 'slow-cartpole'" in bare.stderr, bare.stderr
    assert "--import MODULE" in bare.stderr
    played = distrl("play", "--import", "tests.fixtures.slow", str(run_dir), "--episodes", "2")
    assert played.returncode == 0 and "slow-cartpole: 2 episodes, return" in played.stdout, (
        played.stdout + played.stderr
    )
    exported = distrl(
        "export",
        str(run_dir),
        "--import=tests.fixtures.slow",
        "--format",
        "torchscript",
        "--output",
        str(tmp_path / "policy.pt"),
    )
    assert exported.returncode == 0, exported.stdout + exported.stderr
    assert (tmp_path / "policy.pt").is_file()


def test_python_dash_m_distrl_is_the_distrl_command():
    import subprocess
    import sys

    import distrl

    proc = subprocess.run([sys.executable, "-m", "distrl", "--version"], capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.strip() == f"distrl {distrl.__version__}"
