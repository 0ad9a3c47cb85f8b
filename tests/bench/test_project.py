"""Projection arithmetic on made-up inputs, checked against numbers computed by hand."""

from __future__ import annotations

import pytest

from benchmarks.project import (
    ModelInputs,
    ProjectArgs,
    project,
    project_cmd,
    resolve,
    ring_allreduce_time,
    ring_link_params,
    validate_rows,
)
from tests.helpers import write_csv

P = ModelInputs(
    t_rollout=0.010,
    t_learn=0.020,
    t_other=0.0,
    steps_per_rank=1000,
    epochs=2,
    minibatches=2,
    grad_bytes=1_000_000,
    alpha=1e-5,
    beta=1e-9,
    small_collectives=0,
)


def test_ring_allreduce_time_by_hand():
    assert ring_allreduce_time(1, 1e6, 1e-5, 1e-9) == 0.0
    # W=2: 2*1*1e-5 + 2*1/2 * 1e6 * 1e-9 = 2e-5 + 1e-3
    assert ring_allreduce_time(2, 1e6, 1e-5, 1e-9) == pytest.approx(0.00102)
    # W=4: 2*3*1e-5 + 2*3/4 * 1e6 * 1e-9 = 6e-5 + 1.5e-3
    assert ring_allreduce_time(4, 1e6, 1e-5, 1e-9) == pytest.approx(0.00156)


def test_projection_by_hand():
    w1, w2, w4 = project(P, [1, 2, 4])
    assert w1["t_iter"] == pytest.approx(0.030)
    assert w1["fps"] == pytest.approx(1000 / 0.030)
    assert (w1["speedup"], w1["efficiency"], w1["t_comm"]) == (1.0, 1.0, 0.0)
    # W=2: K*M = 4 all-reduces of 0.00102 s
    assert w2["t_comm"] == pytest.approx(0.00408)
    assert w2["t_iter"] == pytest.approx(0.03408)
    assert w2["fps"] == pytest.approx(58685.446, rel=1e-6)
    assert w2["speedup"] == pytest.approx(1.760563, rel=1e-6)
    assert w2["efficiency"] == pytest.approx(0.880282, rel=1e-6)
    assert w2["rho_comm"] == pytest.approx(0.00408 / 0.03408)
    # W=4: 4 * 0.00156 = 0.00624
    assert w4["t_iter"] == pytest.approx(0.03624)
    assert w4["fps"] == pytest.approx(110375.276, rel=1e-6)
    assert w4["efficiency"] == pytest.approx(0.827815, rel=1e-6)


def test_small_collectives_add_latency_terms():
    p = ModelInputs(**{**P.__dict__, "small_collectives": 3, "small_bytes": 1024})
    (w2,) = project(p, [2])
    # 0.00408 + 3 * (2e-5 + 1024e-9)
    assert w2["t_comm"] == pytest.approx(0.004143072)


def test_ring_link_params_invert_the_fit():
    alpha, beta = ring_link_params(6e-5, 1.5e-9, 4)
    assert alpha == pytest.approx(1e-5) and beta == pytest.approx(1e-9)
    with pytest.raises(ValueError):
        ring_link_params(1e-5, 1e-9, 1)


def test_project_command_from_made_up_summary(tmp_path):
    scaling = tmp_path / "scaling"
    scaling.mkdir()
    base = {
        "rollout_steps": 10,
        "num_envs_per_rank": 100,
        "epochs": 2,
        "minibatches": 2,
        "grad_bytes": 1_000_000,
        "t_rollout": 0.010,
        "t_learn": 0.020,
        "t_other": 0.0,
        "task": "made-up",
        "cpu": "none",
        "note": "",
    }
    write_csv(
        scaling / "summary.csv",
        [
            {**base, "W": 1, "t_iter": 0.030, "t_comm": 0.0, "fps_mean": 1000 / 0.030},
            {**base, "W": 2, "t_iter": 0.040, "t_comm": 0.006, "fps_mean": 2000 / 0.040},
        ],
    )
    args = ProjectArgs(
        world_sizes="1,2,4",
        from_scaling=str(scaling),
        latency_us=10.0,
        bandwidth_gbps=1.0,
        small_collectives=0,
        out=str(tmp_path / "p"),
    )
    p, summary, _ = resolve(args)
    assert (p.alpha, p.beta, p.steps_per_rank) == (pytest.approx(1e-5), pytest.approx(1e-9), 1000)
    val = validate_rows(p, summary)
    assert val[1]["t_iter_predicted"] == pytest.approx(0.03408)
    assert val[1]["rel_error"] == pytest.approx((0.03408 - 0.040) / 0.040)
    rows = project_cmd(args)
    assert rows[1]["efficiency"] == pytest.approx(0.880282, rel=1e-6)
    out = tmp_path / "p"
    for name in ("projection.csv", "validation.csv", "projection.png", "assumptions.txt"):
        assert (out / name).exists(), name
    assert "ring(W, n)" in (out / "assumptions.txt").read_text()


def test_missing_inputs_are_named():
    with pytest.raises(ValueError, match="alpha"):
        resolve(
            ProjectArgs(
                t_rollout=0.01,
                t_learn=0.02,
                steps_per_rank=10,
                epochs=1,
                minibatches=1,
                grad_bytes=4,
                beta=1e-9,
            )
        )
