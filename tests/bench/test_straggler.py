"""`bench straggler`: the mode grid, the summary over seeds, and one tiny real run per role."""

from __future__ import annotations

import pytest

from benchmarks.straggler import StragglerArgs, mode_args, straggler, summarize


def test_modes_have_the_same_workers_and_a_worker_straggles():
    a = StragglerArgs(workers=2)
    assert mode_args("allreduce", a) == ("allreduce", ["--dist.strategy", "allreduce"], 2, 1)
    label, flags, world, slow = mode_args("ps-bap:4", a)
    assert (label, world, slow) == ("ps-bap:4", 3, 2)  # rank 0 serves
    assert flags[:2] == ["--dist.strategy", "ps-bap"] and flags[3] == "4"
    label, flags, world, slow = mode_args("allreduce:0.5", a)  # DD-PPO's preemption
    assert (label, world, slow) == ("allreduce:0.5", 2, 1)
    assert flags == ["--dist.strategy", "allreduce", "--dist.preempt-fraction", "0.5"]
    with pytest.raises(ValueError, match="unknown mode"):
        mode_args("ps-xyz", a)


def _row(mode, slow, sps, t, ret, smax=0, means=(0.0,), dropped=0):
    return dict(
        mode=mode,
        straggler=slow,
        sps=sps,
        time_to_target_s=t,
        final_return=ret,
        staleness_max=smax,
        staleness_means=list(means),
        dropped=dropped,
        iteration_s=0.25,
        preempted=0,
    )


def test_summary_medians_unreached_seeds_and_ratio_to_bsp():
    rows = [
        _row("ps-bsp", True, 100.0, 10.0, 480.0),
        _row("ps-bsp", True, 120.0, 12.0, 490.0),
        _row("ps-asp", True, 150.0, None, 300.0, smax=3, means=(1.2, 0.4), dropped=0),
        _row("ps-asp", True, 170.0, 8.0, 500.0, smax=5, means=(1.6,), dropped=2),
    ]
    s = {r["mode"]: r for r in summarize(rows)}
    assert s["ps-bsp"]["sps"] == 110.0 and s["ps-bsp"]["sps_vs_bsp"] == 1.0
    assert s["ps-asp"]["sps_vs_bsp"] == pytest.approx(160.0 / 110.0)
    assert s["ps-asp"]["time_to_target_s"] is None  # median of (inf, 8) with 2 seeds is inf
    assert s["ps-asp"]["reached"] == "1/2" and s["ps-asp"]["staleness_max"] == 5
    assert s["ps-asp"]["staleness_hist"] == {0: 1, 1: 1, 2: 1} and s["ps-asp"]["dropped"] == 2


@pytest.mark.slow  # four modes x two stragglers of real training runs: ~25 s
@pytest.mark.timeout(240)
def test_tiny_real_run_writes_csv_and_plot(tmp_path):
    a = StragglerArgs(
        modes="allreduce,ps-asp",
        seeds=1,
        out=str(tmp_path),
        extra=("--agent.max-iterations 3 --env.num-envs 16 --agent.num-steps 8",),
        timeout=180,
    )
    summary = straggler(a)
    assert {(r["mode"], r["straggler"]) for r in summary} == {
        (m, s) for m in ("allreduce", "ps-asp") for s in (False, True)
    }
    assert all(r["sps"] > 0 for r in summary)
    for f in ("runs.csv", "summary.csv", "straggler.png"):
        assert (tmp_path / f).stat().st_size > 0
