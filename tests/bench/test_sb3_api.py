"""`distrl bench sb3-api` (distrl's side alone: the peer needs a venv with stable-baselines3):
the SB3 script runs with ``distrl.PPO``, is scored on Gymnasium episodes, and lands in the CSVs."""

from __future__ import annotations

import csv

import pytest

from tests.helpers import run_main

pytestmark = [pytest.mark.long, pytest.mark.timeout(300)]


def test_bench_sb3_api_runs_the_script_with_distrl_and_writes_csv(tmp_path, capsys):
    argv = ["bench", "sb3-api", "--steps", "2048", "--seeds", "1", "--peer-python", ""]
    code, out, err = run_main([*argv, "--out", str(tmp_path)], capsys)
    assert code == 0, out + err
    rows = list(csv.DictReader((tmp_path / "per_run.csv").open()))
    assert len(rows) == 1 and rows[0]["lib"] == "distrl" and int(rows[0]["steps"]) == 2048
    assert float(rows[0]["eval_return_mean"]) >= 8.0  # CartPole's shortest episode
    assert (tmp_path / "runs").is_dir()  # the script's run directory, under --out
