"""The alpha-beta fit recovers known latency and bandwidth; bucketing; a tiny real run."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.comm import DEFAULT_SIZES, buckets, fit_alpha_beta
from tests.helpers import read_csv

ALPHA, BETA = 50e-6, 1 / 5e9  # 50 us, 5 GB/s


def test_fit_recovers_alpha_beta_exactly_on_model_data():
    times = [ALPHA + BETA * n for n in DEFAULT_SIZES]
    alpha, beta, r2 = fit_alpha_beta(DEFAULT_SIZES, times)
    assert alpha == pytest.approx(ALPHA, rel=1e-9)
    assert beta == pytest.approx(BETA, rel=1e-9)
    assert r2 == pytest.approx(1.0)
    alpha, beta, _ = fit_alpha_beta(DEFAULT_SIZES, times, relative=False)
    assert alpha == pytest.approx(ALPHA, rel=1e-6) and beta == pytest.approx(BETA, rel=1e-9)


def test_fit_with_noise_stays_close():
    rng = np.random.default_rng(0)
    times = [(ALPHA + BETA * n) * float(np.exp(rng.normal(0, 0.03))) for n in DEFAULT_SIZES]
    alpha, beta, r2 = fit_alpha_beta(DEFAULT_SIZES, times)
    assert alpha == pytest.approx(ALPHA, rel=0.1)
    assert beta == pytest.approx(BETA, rel=0.1)
    assert r2 > 0.99


def test_buckets_follow_backward_order_and_size_limit():
    assert buckets([10, 20, 30], 100) == [[2], [1], [0]]
    assert buckets([10, 20, 30], 200) == [[2, 1], [0]]
    assert buckets([10, 20, 30], 10**6) == [[2, 1, 0]]


@pytest.mark.slow  # starts a rank group
@pytest.mark.timeout(90)
def test_comm_command_tiny(tmp_path):
    from benchmarks.cli import bench_main

    out = tmp_path / "comm"
    code = bench_main(
        [
            "comm",
            "--sizes",
            "4,4096,65536",
            "--repeats",
            "2",
            "--warmup",
            "1",
            "--backend",
            "gloo",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    fit = read_csv(out / "fit.csv")[0]
    assert {"alpha_s", "beta_s_per_byte", "latency_us", "bandwidth_gbps", "alpha_link_s"} <= set(
        fit
    )
    rows = read_csv(out / "gradsync.csv")
    assert sorted({r["method"] for r in rows}) == ["bucketed", "flat", "per-tensor"]
    assert len({r["model"] for r in rows}) == 2
    assert (out / "comm.png").exists() and (out / "allreduce.csv").exists()
