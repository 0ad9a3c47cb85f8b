"""`distrl bench apex` and `distrl bench sinks`, shrunk: each arm runs, is measured, and lands in
the CSV (and the plot)."""

from __future__ import annotations

import csv

import pytest

from tests.cluster import testbed
from tests.helpers import run_main

pytestmark = [pytest.mark.long, pytest.mark.timeout(400)]


def test_bench_apex_runs_both_arms_and_writes_csv_and_plot(tmp_path, capsys):
    argv = ["bench", "apex", "--steps", "4096", "--seeds", "1", "--eval-interval", "4"]
    argv += ["--flags=--offpolicy.learning-starts 512", "--out", str(tmp_path)]
    code, out, err = run_main(argv, capsys)
    assert code == 0, out + err
    rows = list(csv.DictReader((tmp_path / "apex.csv").open()))
    assert sorted(r["arm"] for r in rows) == ["allreduce", "apex"]
    assert all(float(r["best_eval"]) >= 8.0 for r in rows)  # cartpole's shortest episode
    assert (tmp_path / "apex.png").stat().st_size > 0


@pytest.mark.skipif(testbed.missing() is not None, reason=f"no testbed: {testbed.missing()}")
def test_bench_sinks_counts_the_bytes_between_machines(tmp_path, capsys):
    argv = ["bench", "sinks", "--nodes", "2", "--repeats", "1", "--iterations", "3"]
    code, out, err = run_main([*argv, "--out", str(tmp_path)], capsys)
    assert code == 0, out + err
    rows = {r["arm"]: r for r in csv.DictReader((tmp_path / "sinks.csv").open())}
    assert rows.keys() == {"flat", "sinks"}
    assert float(rows["sinks"]["bytes_vs_flat"]) < 0.5, rows
