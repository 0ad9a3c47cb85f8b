"""`distrl bench metaworld`: both sides step the same envs, the CSV has one row per task with
positive rates and a ratio that is their per-repeat median, and bad arguments are refused."""

from __future__ import annotations

import csv

import pytest

from benchmarks.cli import bench_main
from benchmarks.meta_world import MetaWorldArgs, metaworld

pytest.importorskip("metaworld")


def test_bench_metaworld_writes_rates_and_ratio(tmp_path) -> None:
    rows = metaworld(
        MetaWorldArgs(tasks="reach-v3", num_envs=2, steps=20, repeats=3, out=str(tmp_path))
    )
    assert [r["task"] for r in rows] == ["reach-v3"]
    (row,) = rows
    assert row["distrl_sps"] > 0 and row["sync_sps"] > 0
    assert row["ratio_min"] <= row["ratio"] <= row["ratio_max"]
    with open(tmp_path / "metaworld.csv") as f:
        (saved,) = list(csv.DictReader(f))
    assert saved["task"] == "reach-v3" and float(saved["ratio"]) == pytest.approx(row["ratio"])


def test_bench_metaworld_refuses_unknown_tasks_and_zero_steps(capsys) -> None:
    assert bench_main(["metaworld", "--tasks", "reach-v2"]) == 2
    assert "unknown MT10 task" in capsys.readouterr().err
    assert bench_main(["metaworld", "--tasks", "reach-v3", "--steps", "0"]) == 2
    assert "--steps" in capsys.readouterr().err


def test_bench_metaworld_times_the_pool_as_a_third_side(tmp_path) -> None:
    (row,) = metaworld(MetaWorldArgs(tasks="reach-v3", num_envs=2, steps=20, repeats=3,
                                     pool_workers=2, out=str(tmp_path)))  # fmt: skip
    assert row["pool_sps"] > 0 and row["pool_workers"] == 2
    assert row["pool_ratio_min"] <= row["pool_ratio"] <= row["pool_ratio_max"]
    assert bench_main(["metaworld", "--tasks", "reach-v3", "--num-envs", "2",
                       "--pool-workers", "3"]) == 2  # fmt: skip
