"""`distrl bench cluster`'s arithmetic and argument checks, on made-up timings (no namespaces:
the testbed itself is tested in tests/cluster)."""

from __future__ import annotations

import os

import pytest

from benchmarks.broadcast import shape_rows
from benchmarks.cluster import (
    ClusterArgs,
    binomial_tree_time,
    fit_rates,
    parse_args,
    sync_link_bound,
)
from benchmarks.project import ProjectArgs, resolve
from tests.cluster.testbed import Testbed, tbf_args
from tests.helpers import write_csv


def ring_points(rate_mbit: float, alpha_step: float, worlds: list[int]) -> list[dict]:
    """Exact ring all-reduce times on a link of ``rate_mbit`` with ``alpha_step`` per step."""
    beta = 8 / (rate_mbit * 1e6)
    return [
        {
            "rate_mbit": rate_mbit,
            "W": w,
            "bytes": n,
            "time_s": 2 * (w - 1) * alpha_step + 2 * (w - 1) / w * n * beta,
        }
        for w in worlds
        for n in (10_000, 1_000_000, 16_000_000)
    ]


def test_the_fit_at_two_nodes_recovers_the_link_and_predicts_four():
    points = ring_points(100, 2e-4, [2, 4]) + ring_points(1000, 1e-4, [2, 4])
    fits = fit_rates(points)
    assert [f["rate_mbit"] for f in fits] == [100, 1000]
    for f, alpha in zip(fits, (2e-4, 1e-4), strict=True):
        assert f["W"] == 2 and f["fit_of_rate"] == pytest.approx(1.0)
        assert f["alpha_link_s"] == pytest.approx(alpha)
        assert f["max_abs_err_fit"] < 1e-9 and f["max_abs_err_projected"] < 1e-9
    for p in points:
        assert p["fitted"] == (p["W"] == 2)
        assert p["model_s"] == pytest.approx(p["time_s"])
        assert p["of_link"] <= 1.0  # the link-only time leaves out alpha


def test_a_slower_link_than_nominal_shows_in_the_fit_and_the_projection_error():
    points = ring_points(100, 0.0, [2, 4])
    for p in points:
        p["time_s"] *= 1.25 if p["W"] == 4 else 1.0  # W=4 a quarter slower than the ring says
    (f,) = fit_rates(points)
    assert f["fit_of_rate"] == pytest.approx(1.0)
    assert f["max_abs_err_projected"] == pytest.approx(1 - 1 / 1.25)


def test_fit_rows_feed_bench_project(tmp_path):
    (f,) = fit_rates(ring_points(300, 5e-5, [2]))
    write_csv(tmp_path / "fit_300mbit.csv", [f | {"cpu": "x", "cores": 2, "torch": "2"}])
    p, _, notes = resolve(
        ProjectArgs(
            from_comm=str(tmp_path / "fit_300mbit.csv"),
            t_rollout=0.1,
            t_learn=0.1,
            steps_per_rank=100,
            epochs=1,
            minibatches=1,
            grad_bytes=1000,
        )
    )
    assert p.alpha == pytest.approx(5e-5) and p.beta == pytest.approx(8 / 300e6)
    assert "W=2 (gloo)" in notes[0]


def test_the_link_bound_of_each_weight_sync_method():
    m, bw = 400e6, 125e6  # a 100M-parameter model, 1000 Mbit/s links: 3.2 s per model per link
    assert sync_link_bound("routing", m, 16, 4, bw) == pytest.approx(4 * 3.2)  # senders' links
    assert sync_link_bound("routing", m, 2, 4, bw) == pytest.approx(3.2)  # each actor's link
    assert sync_link_bound("naive", m, 16, 1, bw) == pytest.approx(16 * 3.2)
    assert sync_link_bound("broadcast", m, 16, 1, bw) == pytest.approx(11 * 3.2)  # see below
    assert sync_link_bound("p2p", m, 16, 1, bw) == pytest.approx(3.2)


def test_gloos_binomial_tree_forwards_only_whole_models():
    assert binomial_tree_time(1, 1.0) == 0.0
    assert binomial_tree_time(2, 1.0) == 1.0
    assert binomial_tree_time(3, 1.0) == 2.0  # the root sends to 1 and 2 at once
    # 5 ranks: the root to 1, 2 and 4 at once (3 models on its link), then 1 to 3
    assert binomial_tree_time(5, 1.0) == 4.0
    # 9: the root to 1, 2, 4, 8 (4); 1 to 3, 5 (6); 3 to 7 (7)
    assert binomial_tree_time(9, 1.0) == 7.0
    # 17: the root to 5 children (5); 1 to 3, 5, 9 (8); 3 to 7, 11 (10); 7 to 15 (11)
    assert binomial_tree_time(17, 1.0) == 11.0


def test_routing_from_more_senders_is_set_against_one_sender_and_naive():
    timed = [
        {"params": 1000, "method": "routing", "senders": 1, "time_median_s": 8.0},
        {"params": 1000, "method": "routing", "senders": 2, "time_median_s": 4.0},
        {"params": 1000, "method": "naive", "senders": 1, "time_median_s": 8.0},
        {"params": 1000, "method": "broadcast", "senders": 1, "time_median_s": 6.0},
        {"params": 1000, "method": "p2p", "senders": 1, "time_median_s": 2.0},
    ]
    rows = {(r["method"], r["senders"]): r for r in shape_rows(2, 4, timed, "gloo", True)}
    two = rows[("routing", 2)]
    assert two["vs_one_sender"] == 2.0 and two["vs_naive"] == 2.0 and two["L"] == 2
    assert two["aggregate_gbps"] == pytest.approx(4 * 4000 / 4.0 / 1e9)
    assert rows[("routing", 1)]["vs_one_sender"] == 1.0
    assert rows[("naive", 1)]["vs_one_sender"] is None
    assert rows[("naive", 1)]["imbalance"] == 1.0  # one sender's table


@pytest.mark.parametrize(
    "args, match",
    [
        (ClusterArgs(rates="fast"), "must be numbers"),
        (ClusterArgs(rates="0"), "--rates must be positive"),
        (ClusterArgs(sizes_mb="1"), "--sizes-mb needs two sizes"),
        (ClusterArgs(worlds="1,2"), "--worlds must be 2"),
        (ClusterArgs(repeats=0), "--repeats must be >= 1"),
        (ClusterArgs(rates=""), "nothing to measure"),
        (ClusterArgs(broadcast_params="1000", broadcast_actors="0"), "--broadcast-learners"),
        (
            ClusterArgs(broadcast_params="1000", broadcast_learners="100", broadcast_actors="100"),
            "at most 154 nodes",
        ),
    ],
)
def test_bad_arguments_are_refused_naming_the_flag(args, match):
    with pytest.raises(ValueError, match=match):
        parse_args(args)


def test_tbf_bucket_holds_a_gso_packet_and_two_ms_at_the_rate():
    assert tbf_args(100)[:5] == ["tbf", "rate", "100mbit", "burst", str(64 * 1024)]
    assert tbf_args(10_000)[4] == str(int(10e9 / 8 * 0.002))  # 2.5 MB at 10 Gbit/s


def test_each_node_gets_its_share_of_the_cores(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})

    def shares(nodes: int) -> list[list[int]]:
        tb = Testbed(nodes=nodes)  # nothing is made before `with`
        return [tb.cpus(n) for n in tb.nodes]

    assert shares(1) == [[0, 1, 2, 3]]
    assert shares(2) == [[0, 1], [2, 3]]
    assert shares(3) == [[0], [1], [2]]
    assert shares(6) == [[0], [1], [2], [3], [0], [1]]  # more nodes than cores: round robin


def test_testbed_refuses_bad_sizes_and_names():
    with pytest.raises(ValueError, match="nodes must be 1"):
        Testbed(nodes=0)
    with pytest.raises(ValueError, match="prefix must be"):
        Testbed(nodes=2, prefix="a-b")
