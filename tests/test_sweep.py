"""`distrl sweep`: trials as run directories, the csv and the Optuna storage, the best trial's
command, pruning through the callbacks, refused space files, --resume and --nproc."""

from __future__ import annotations

import csv
import importlib.util
import sys
from pathlib import Path

import pytest

from distrl.install import pip_install
from tests.helpers import QUIET, run_main

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(
        importlib.util.find_spec("optuna") is None,
        reason=f"the sweep extra is not installed: {pip_install('sweep')}",
    ),
]

TINY = ["--env.num-envs", "16", "--agent.num-steps", "32", "--agent.max-iterations", "2", *QUIET]


def rows(sweep_dir: Path) -> list[dict[str, str]]:
    with (sweep_dir / "sweep.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def test_a_sweep_writes_trial_runs_csv_storage_and_resumes(capsys, tmp_path, monkeypatch):
    import optuna

    from distrl.sweep import DEFAULT_SPACES

    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(
        ["sweep", "cartpole", "--trials", "2", "--seed", "3", "--", *TINY], capsys
    )
    assert code == 0, err
    (sweep_dir,) = (tmp_path / "runs").glob("sweep-cartpole-*")
    assert {"study.db", "sweep.csv", "sweep.yaml"} <= {p.name for p in sweep_dir.iterdir()}
    for k in (0, 1):
        run = sweep_dir / f"trial_{k}"
        assert (run / "config.yaml").is_file() and (run / "metrics.jsonl").is_file()
        assert list((run / "checkpoints").glob("ckpt_*.pt"))
    table = rows(sweep_dir)
    assert [r["state"] for r in table] == ["COMPLETE", "COMPLETE"]
    assert "agent.learning_rate" in table[0] and float(table[0]["value"]) > 0
    best = max(table, key=lambda r: float(r["value"]))
    assert f"best: trial {best['trial']}" in out
    assert "a trial's value: the mean of episode_return_mean over a trial's last 5 records" in out
    config = sweep_dir.relative_to(tmp_path) / f"trial_{best['trial']}" / "config.yaml"
    assert f"distrl train --config {config}" in out

    # --seed: the trials TPESampler(seed) proposes (its first ones are random draws)
    probe = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=3))
    trial = probe.ask()
    expected = {p.name: p.suggest(trial) for p in DEFAULT_SPACES["ppo"]}
    assert {k: float(table[0][k]) for k in expected} == pytest.approx(expected)

    # --resume continues the study with its own settings, proposing new values
    code, out, err = run_main(["sweep", "--resume", str(sweep_dir), "--trials", "3"], capsys)
    assert code == 0, err
    table = rows(sweep_dir)
    assert [r["trial"] for r in table] == ["0", "1", "2"]
    assert table[2]["agent.learning_rate"] not in (
        table[0]["agent.learning_rate"],
        table[1]["agent.learning_rate"],
    )
    assert (sweep_dir / "trial_2" / "metrics.jsonl").is_file()


def test_pruned_trials_stop_their_runs_early(tmp_path):
    import optuna

    from distrl.sweep import SweepArgs, run_sweep
    from distrl.telemetry import read_metrics

    class PruneAfterFirstReport(optuna.pruners.BasePruner):
        def prune(self, study, trial):
            return trial.last_step is not None

    tiny = [*TINY[: -len(QUIET) - 1], "5", *QUIET]  # 5 iterations, were they not pruned
    args = SweepArgs(task="cartpole", trials=3, sweep_dir=str(tmp_path / "sw"))
    result = run_sweep(args, tiny, pruner=PruneAfterFirstReport(), say=lambda _: None)
    states = [t.state for t in result.study.trials]
    assert states == [optuna.trial.TrialState.PRUNED] * 3
    for k in range(3):
        records = read_metrics(tmp_path / "sw" / f"trial_{k}")
        assert [r["iteration"] for r in records] == [1]  # the hook stopped it after the first
    assert [r["state"] for r in rows(tmp_path / "sw")] == ["PRUNED"] * 3


@pytest.mark.parametrize(
    "space, named",
    [
        ("agent.lernin_rate: {type: float, low: 0.001, high: 0.01}", "agent.learning_rate"),
        ("agent.gamma: {type: float, low: 0.9, high: 1.5}", "agent.gamma"),
        ("agent.num_epochs: {type: float, low: 1, high: 4}", "agent.num_epochs is an integer"),
        ("agent: {type: int, low: 1, high: 4}", "agent.num_epochs"),
        ("agent.gamma: {type: float, low: 0.9}", "agent.gamma: needs numbers low < high"),
    ],
)
def test_a_bad_space_file_is_refused_naming_the_field(capsys, tmp_path, space, named):
    path = tmp_path / "space.yaml"
    path.write_text(space + "\n")
    argv = ["sweep", "cartpole", "--space", str(path), "--sweep-dir", str(tmp_path / "sw")]
    code, _, err = run_main([*argv, "--", *TINY], capsys)
    assert code == 2 and named in err and str(path) in err, err
    assert not (tmp_path / "sw").exists()


def test_a_config_no_trial_could_train_is_refused_before_the_first(capsys, tmp_path):
    argv = ["sweep", "cartpole", "--sweep-dir", str(tmp_path / "sw"), "--"]
    code, _, err = run_main([*argv, *TINY, "--dist.strategy", "ps-bsp"], capsys)
    assert code == 2 and "ps-bsp" in err, err
    assert not (tmp_path / "sw").exists()


def test_without_optuna_the_error_names_the_extra(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna", None)  # import optuna raises ImportError
    code, _, err = run_main(["sweep", "cartpole", "--sweep-dir", str(tmp_path / "sw")], capsys)
    assert code == 2 and pip_install("sweep") in err, err


@pytest.mark.slow
def test_nproc_trials_run_under_the_launcher_and_prune_while_it_runs(tmp_path):
    """One launched trial (a launch costs ~10 s here): its records are read while it runs, and
    the pruned trial's launcher gets SIGTERM, so its ranks stop early and save."""
    import optuna

    from distrl.sweep import SweepArgs, run_sweep
    from distrl.telemetry import read_metrics

    class PruneAfterFirstReport(optuna.pruners.BasePruner):
        def prune(self, study, trial):
            return trial.last_step is not None

    sweep_dir = tmp_path / "sw"
    args = SweepArgs(task="cartpole", trials=1, nproc=2, sweep_dir=str(sweep_dir))
    tiny = [*TINY[: -len(QUIET) - 1], "30", *QUIET]
    result = run_sweep(args, tiny, pruner=PruneAfterFirstReport(), say=lambda _: None)
    assert [r["state"] for r in rows(sweep_dir)] == ["PRUNED"]
    (trial,) = result.study.trials
    assert trial.intermediate_values and float(rows(sweep_dir)[0]["value"]) > 0
    config = (sweep_dir / "trial_0" / "config.yaml").read_text()
    assert "nproc: 2" in config and "distributed: true" in config  # the ranks rewrote it
    assert 1 <= len(read_metrics(sweep_dir / "trial_0")) < 30
    assert list((sweep_dir / "trial_0" / "checkpoints").glob("ckpt_*.pt"))


@pytest.mark.slow
def test_parallel_trials_train_side_by_side_with_the_cores_split(tmp_path, monkeypatch):
    """--parallel 2: each trial its own `distrl train` process, two alive at once, each with
    cores / 2 threads; the trials end as a sequential sweep's do."""
    import os

    import yaml

    from distrl import sweep

    launched: list = []
    alive_at_launch: list[int] = []

    def launch(cfg):
        alive_at_launch.append(sum(p.poll() is None for p in launched))
        launched.append(real(cfg))
        return launched[-1]

    real = sweep._launch
    monkeypatch.setattr(sweep, "_launch", launch)
    sweep_dir = tmp_path / "sw"
    args = sweep.SweepArgs(task="cartpole", trials=3, parallel=2, sweep_dir=str(sweep_dir))
    sweep.run_sweep(args, TINY, say=lambda _: None)
    assert [r["state"] for r in rows(sweep_dir)] == ["COMPLETE"] * 3
    assert max(alive_at_launch) == 1 and len(launched) == 3
    cores = len(os.sched_getaffinity(0))
    for k in range(3):
        config = yaml.safe_load((sweep_dir / f"trial_{k}" / "config.yaml").read_text())
        assert config["threads"] == max(1, cores // 2)
