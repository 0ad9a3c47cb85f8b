"""`distrl bench update` on a tiny learner: its row, its file, parts that add up to the update,
and the refusal of a learner without a replay. No timing ratio is asserted (speed is measured
by the benchmark, never by a test)."""

from __future__ import annotations

import dataclasses

import pytest

from benchmarks.update import UpdateArgs, update
from tests.helpers import read_csv

TINY = "--policy.actor-hidden 16 16 --policy.critic-hidden 16 16 --offpolicy.batch-size 32"


@pytest.mark.parametrize(("algorithm", "task"), [("sac", "pendulum"), ("dqn", "cartpole")])
def test_update_reports_the_parts_of_one_update(algorithm, task, tmp_path):
    a = UpdateArgs(algorithm, task, updates=4, repeats=2, profile=True, flags=TINY)
    row = update(dataclasses.replace(a, out=str(tmp_path)))
    assert row["batch"] == 32 and row["threads"] == 1
    assert row["mflop_per_update"] > 0
    rate = row["mflop_per_update"] / row["ms_per_update"]  # MFLOP per ms: GFLOP/s
    assert row["gflops"] == pytest.approx(rate, rel=0.05, abs=2e-3)
    parts = sum(row[f"ms_{k}"] for k in ("forward", "backward", "decide", "apply"))
    assert 0.3 * row["ms_per_update"] < parts < 3.0 * row["ms_per_update"], row
    assert 0.0 < row["matmul_share"] <= 1.0
    (saved,) = read_csv(tmp_path / f"{algorithm}-{task}-t1.csv")
    assert float(saved["ms_per_update"]) == row["ms_per_update"]


def test_update_refuses_a_learner_without_a_replay(tmp_path):
    with pytest.raises(ValueError, match="choose a replay learner"):
        update(UpdateArgs("pqn", "cartpole", out=str(tmp_path)))
