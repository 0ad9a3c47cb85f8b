"""`distrl bench cluster`'s arithmetic and argument checks, on made-up timings (no namespaces:
the testbed itself is tested in tests/cluster)."""

from __future__ import annotations

import os

import pytest

from benchmarks.cluster import ClusterArgs, fit_rates, parse_args
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


@pytest.mark.parametrize(
    "args, match",
    [
        (ClusterArgs(rates="fast"), "must be numbers"),
        (ClusterArgs(rates="0"), "--rates must be positive"),
        (ClusterArgs(sizes_mb="1"), "--sizes-mb needs two sizes"),
        (ClusterArgs(worlds="1,2"), "--worlds must be 2"),
        (ClusterArgs(repeats=0), "--repeats must be >= 1"),
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
