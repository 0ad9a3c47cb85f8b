"""Time-to-target logic, the summary over seeds, median curves and the verdict rule."""

from __future__ import annotations

import dataclasses

import pytest

from benchmarks.learn import (
    LearnArgs,
    check_marks,
    flag_value,
    learns_as_well,
    make_plan,
    median_curve,
    return_at,
    summarize_times,
    time_to_target,
)


def _recs(returns, dt=2.0, steps=100):
    return [
        {
            "iteration": i + 1,
            "env_steps": steps * (i + 1),
            "wall_time": dt * (i + 1),
            "episode_return_mean": r,
        }
        for i, r in enumerate(returns)
    ]


def test_time_to_target_is_first_crossing():
    recs = _recs([None, 10.0, 50.0, 40.0, 60.0])
    assert time_to_target(recs, 50.0) == (6.0, 300)  # >= counts, later dips do not matter
    assert time_to_target(recs, 45.0) == (6.0, 300)
    assert time_to_target(recs, 61.0) == (None, None)
    assert time_to_target([], 1.0) == (None, None)


def test_summarize_times_counts_unreached_as_infinitely_slow():
    s = summarize_times([1.0, None, 3.0])
    assert s == {"reached": 2, "median_time_s": 3.0, "min_time_s": 1.0, "max_time_s": 3.0}
    s = summarize_times([None, None, 1.0])
    assert s["median_time_s"] is None and s["reached"] == 1
    assert summarize_times([2.0, 4.0])["median_time_s"] == 3.0


def test_median_curve_holds_final_value_of_shorter_seed():
    grid, med = median_curve([[0, 10], [0, 20], [0, 20]], [[0, 10], [0, 20], [0, 40]], n=3)
    assert grid == [0.0, 10.0, 20.0]
    # at x=20 the first seed holds 10; the others are 20 and 40
    assert med == pytest.approx([0.0, 10.0, 20.0])
    assert median_curve([[]], [[]]) is None


def test_learns_as_well_rule():
    base = {"median_final_return": 500.0, "reached": 3}
    tol = 0.05  # 5% of |475| = 23.75
    assert learns_as_well(base, {"median_final_return": 480.0, "reached": 2}, 475.0, tol)
    assert not learns_as_well(base, {"median_final_return": 470.0, "reached": 2}, 475.0, tol)
    assert learns_as_well(base, {"median_final_return": 300.0, "reached": 3}, 475.0, tol)
    assert learns_as_well(base, {"median_final_return": None, "reached": 0}, 475.0, tol) is None


def test_return_at_averages_the_records_just_before_the_mark():
    recs = _recs([1.0, None, 3.0, 5.0, 7.0], steps=100)  # env steps 100..500
    assert return_at(recs, 400, window=0.25) == pytest.approx(4.0)  # 300 and 400, not 500
    assert return_at(recs, 250, window=0.25) == 1.0  # none in [187, 250] with a return: 100's
    assert return_at(recs, 420, window=0.01) == 5.0  # iterations coarser than the window
    assert return_at(recs, 1000) is None  # the run ended before the mark
    assert return_at(recs, 50) is None  # nothing logged by then
    assert return_at(recs, 500, window=0.0) == 7.0


def test_marks_beyond_the_budget_are_refused_naming_it():
    check_marks((5_000_000,), {1: 5_000_000, 2: 10_000_000})
    with pytest.raises(ValueError, match=r"mark 10,000,000 lies beyond .*W=1 \(5,000,000\)"):
        check_marks((10_000_000,), {1: 5_000_000, 2: 10_000_000})
    with pytest.raises(ValueError, match="positive"):
        check_marks((0,), {1: 10})


def test_the_budget_reads_the_rollout_length_from_extra_in_either_spelling():
    flag = "--agent.num-steps"
    assert flag_value(["--agent.learning-rate", "3e-4"], flag, 128) == 128
    assert flag_value([flag, "64"], flag, 128) == 64
    assert flag_value([f"{flag}=32", "--seed", "1"], flag, 128) == 32
    assert flag_value([flag, "64", f"{flag}=16"], flag, 128) == 16  # the last wins, as in tyro


def test_an_algorithm_s_defaults_are_the_base_of_the_plan():
    """--algorithm pqn: PQN's envs, iterations and rollout length for the task (so --marks
    checks its budget), and every run gets --algorithm pqn; ppo's plan is unchanged."""
    a = LearnArgs(task="minatar-breakout", world_sizes="2", mode="weak", marks=(5_000_000,))
    ppo = make_plan(a)
    assert ppo.envs == {2: 64} and ppo.iterations == 1221 and "--algorithm" not in ppo.extra
    plan = make_plan(dataclasses.replace(a, algorithm="pqn"))
    assert plan.envs == {2: 128} and plan.iterations == -(-5_000_000 // (128 * 32))
    assert plan.extra[:2] == ["--algorithm", "pqn"]
    with pytest.raises(ValueError, match="mark 20,000,000 lies beyond"):
        make_plan(dataclasses.replace(a, algorithm="pqn", marks=(20_000_000,)))
