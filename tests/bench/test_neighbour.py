"""`distrl bench neighbour`: a task timed alone and beside a second distrl run, and a sweep's
two trials one at a time and side by side; each writes its CSV with a row per setting."""

from __future__ import annotations

import csv

import pytest

from tests.helpers import run_main

pytestmark = pytest.mark.long


def _rows(path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_alone_and_beside_a_second_run(tmp_path, capsys):
    argv = ["bench", "neighbour", "--task", "cartpole", "--iterations", "3", "--skip", "1"]
    argv += ["--runs", "1", "--envs", "default", "--out", str(tmp_path)]
    code, out, err = run_main(argv, capsys)
    assert code == 0, out + err
    (row,) = _rows(tmp_path / "neighbour.csv")
    assert row["setting"] == "default"
    assert float(row["learn_alone_s"]) > 0 and float(row["learn_beside_s"]) > 0


def test_a_sweeps_trials_one_at_a_time_and_side_by_side(tmp_path, capsys):
    argv = ["bench", "neighbour", "--task", "cartpole", "--sweep", "True", "--iterations", "3"]
    argv += ["--skip", "1", "--runs", "1", "--out", str(tmp_path)]
    code, out, err = run_main(argv, capsys)
    assert code == 0, out + err
    rows = _rows(tmp_path / "neighbour_sweep.csv")
    assert [r["setting"] for r in rows] == ["sweep --parallel 1", "sweep --parallel 2"]
    assert all(float(r["wall_s"]) > float(r["iter_s"]) > 0 for r in rows)
