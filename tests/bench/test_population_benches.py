"""`distrl bench pbt` and `distrl bench selfplay`, shrunk: each arm or seed runs, is scored, and
lands in the CSVs, the JSON and the plot."""

from __future__ import annotations

import csv
import json

import pytest

from tests.helpers import run_main

pytestmark = [pytest.mark.long, pytest.mark.timeout(300)]


def test_bench_pbt_runs_both_arms_and_writes_csv(tmp_path, capsys):
    argv = ["bench", "pbt", "--task", "cartpole", "--steps", "16384", "--interval", "8192"]
    argv += ["--members", "2", "--seeds", "1", "--out", str(tmp_path)]
    code, out, err = run_main(argv, capsys)
    assert code == 0, out + err
    rows = list(csv.DictReader((tmp_path / "per_run.csv").open()))
    assert sorted(r["arm"] for r in rows) == ["fixed", "pbt"]
    assert all(float(r["play_best"]) >= 8.0 for r in rows)  # cartpole's shortest episode
    generations = {r["arm"]: [c for c in csv.DictReader((tmp_path / "curve.csv").open())
                              if c["arm"] == r["arm"]] for r in rows}  # fmt: skip
    assert len(generations["fixed"]) == 1 and len(generations["pbt"]) == 2
    summary = json.loads((tmp_path / "results.json").read_text())["summary"]
    assert summary["members"] == 2 and (tmp_path / "pbt_vs_fixed.png").stat().st_size > 0


def test_bench_selfplay_reports_win_rates_and_ratings(tmp_path, capsys):
    argv = ["bench", "selfplay", "--seeds", "1", "--target", "0.5", "--out", str(tmp_path)]
    argv += ["--iterations", "10", "--num-envs", "64"]
    code, out, err = run_main(argv, capsys)
    assert code == 0, out + err
    (row,) = list(csv.DictReader((tmp_path / "per_run.csv").open()))
    assert 0.0 <= float(row["final_win_vs_random"]) <= 1.0
    assert int(row["env_steps"]) == 10 * 64 * 32 and float(row["final_elo"]) != 1000.0
    assert (tmp_path / "selfplay.png").stat().st_size > 0
