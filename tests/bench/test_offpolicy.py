"""`distrl bench offpolicy` (distrl's side alone: the peer needs a venv with stable-baselines3):
a run trains, is scored by `distrl play`, and lands in the CSVs."""

from __future__ import annotations

import csv

import pytest

from tests.helpers import run_main

pytestmark = [pytest.mark.long, pytest.mark.timeout(300)]


def test_bench_offpolicy_trains_scores_and_writes_csv(tmp_path, capsys):
    argv = ["bench", "offpolicy", "--algorithm", "dqn", "--task", "cartpole", "--steps", "2048"]
    argv += ["--seeds", "1", "--peer-python", "", "--out", str(tmp_path)]
    code, out, err = run_main(argv, capsys)
    assert code == 0, out + err
    rows = list(csv.DictReader((tmp_path / "per_run.csv").open()))
    assert len(rows) == 1 and rows[0]["side"] == "distrl" and int(rows[0]["steps"]) == 2048
    assert float(rows[0]["eval_return_mean"]) >= 8.0  # cartpole's shortest episode
    summary = list(csv.DictReader((tmp_path / "summary.csv").open()))
    assert summary[0]["algorithm"] == "dqn" and summary[0]["runs"] == "1"
