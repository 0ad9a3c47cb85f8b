"""`bench scaling` end to end at toy size (real torchrun with 2 Gloo ranks), and its arithmetic."""

from __future__ import annotations

import csv

import pytest

from benchmarks.cli import bench_main
from benchmarks.common import parse_ints
from benchmarks.runs import per_rank_envs
from benchmarks.scaling import SUMMARY_COLUMNS, run_stats
from tests.helpers import read_csv


@pytest.mark.slow  # torchrun launches at W = 1 and 2, plus the ceiling runs: ~12 s
@pytest.mark.timeout(150)
def test_scaling_writes_csv_schema_and_plot(tmp_path):
    out = tmp_path / "scaling"
    code = bench_main(
        [
            "scaling",
            "--world-sizes",
            "1,2",
            "--iterations",
            "3",
            "--warmup",
            "1",
            "--repeats",
            "1",
            "--num-envs",
            "32",
            "--num-steps",
            "8",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    with (out / "summary.csv").open(newline="") as f:
        header = next(csv.reader(f))
    assert header[: len(SUMMARY_COLUMNS)] == SUMMARY_COLUMNS
    summary = read_csv(out / "summary.csv")
    assert [int(r["W"]) for r in summary] == [1, 2]
    w1, w2 = summary
    assert float(w1["speedup"]) == pytest.approx(1.0)
    assert float(w1["ceiling_fps"]) == pytest.approx(float(w1["fps_mean"]))
    assert int(w2["global_batch"]) == 2 * 32 * 8  # weak: envs per rank kept
    assert float(w2["t_comm"]) > 0 and float(w2["ceiling_fps"]) > 0
    assert w2["t_sync"] == ""  # not measured without --profile-sync
    fps2 = float(w2["fps_mean"])
    assert float(w2["efficiency"]) == pytest.approx(fps2 / (2 * float(w1["fps_mean"])))
    assert float(w2["efficiency_vs_ceiling"]) == pytest.approx(fps2 / float(w2["ceiling_fps"]))
    kinds = sorted((int(r["W"]), r["kind"]) for r in read_csv(out / "per_run.csv"))
    assert kinds == [(1, "distributed"), (2, "ceiling"), (2, "distributed")]
    assert (out / "plots.png").stat().st_size > 0


def test_run_stats_drops_warmup_and_divides_steps_by_time():
    recs = [
        {
            "env_steps": 100 * i,
            "time/iteration": t,
            "time/rollout": t / 2,
            "time/learn": t / 4,
            "time/comm": t / 8,
            "time/sync": None,
            "time/rollout_max": t / 2,
            "rank/0/comm": t / 8,
            "rank/1/comm": t / 16,
        }
        for i, t in ((1, 10.0), (2, 0.5), (3, 1.5))
    ]
    st = run_stats(recs, warmup=1)
    assert st["rank0_comm"] == pytest.approx(0.125) and st["rank1_comm"] == pytest.approx(0.0625)
    assert st["fps"] == pytest.approx(200 / 2.0)
    assert st["t_iter"] == pytest.approx(1.0)
    assert st["t_rollout"] == pytest.approx(0.5)
    assert st["t_sync"] is None
    assert st["t_other"] == pytest.approx(1.0 - 0.5 - 0.25 - 0.125)
    with pytest.raises(ValueError, match="warmup"):
        run_stats(recs, warmup=3)


def test_world_sizes_and_strong_division():
    assert parse_ints("4,1, 2") == [1, 2, 4]
    assert per_rank_envs(64, 4, "weak") == 64
    assert per_rank_envs(64, 4, "strong") == 16
    with pytest.raises(ValueError, match="does not divide"):
        per_rank_envs(64, 3, "strong")
