"""`distrl bench roofline` in a tiny configuration: its files, its columns, that the phases add
up to the iteration, and that the GEMM list is the one a [64, 64] MLP implies. No timing ratio
is asserted (speed is measured by the benchmark, never by a test)."""

from __future__ import annotations

import math

import pytest

from benchmarks.roofline import PHASES, Gemm, RooflineArgs, instrument, trace_gemms
from tests.helpers import read_csv, run_main

TINY = ["--envs", "64", "--steps", "8", "--epochs", "2", "--minibatches", "2"]
TINY += ["--iterations", "2", "--repeats", "1", "--gemm-reps", "3"]

PHASE_COLUMNS = {"phase", "measured_s", "bound_s", "shape_bound_s", "fraction", "bound_kind"}
PHASE_COLUMNS |= {"shape_fraction", "task", "num_envs", "minibatch_size", "threads", "cpu"}
GEMM_COLUMNS = {"phase", "kind", "M", "K", "N", "calls_per_iteration", "us_per_call", "gflops"}
GEMM_COLUMNS |= {"layers", "of_peak", "cpu", "torch"}


def expected_gemms(rows: int, mb: int, obs: int, hidden: int, actions: int) -> set:
    """(phase, kind, M, K, N) of a cartpole policy with [hidden, hidden] actor and critic."""
    fwd = {(obs, hidden), (hidden, hidden), (hidden, actions), (hidden, 1)}
    out = {("rollout_policy", "fwd", rows, k, n) for k, n in fwd}
    out |= {("forward", "fwd", mb, k, n) for k, n in fwd}
    out |= {("other", "fwd", rows, k, n) for k, n in fwd if n != actions}  # GAE's V(last obs)
    out |= {("backward", "wgrad", n, mb, k) for k, n in fwd}
    # no grad-input for the first layer: the (normalized) observations need no gradient
    out |= {("backward", "dgrad", mb, n, k) for k, n in fwd if k != obs}
    return out


def gemm_key(row: dict) -> tuple:
    """(phase, kind, M, K, N) of a roofline_gemms.csv row."""
    return (row["phase"], row["kind"], int(row["M"]), int(row["K"]), int(row["N"]))


def test_roofline_tiny(tmp_path, capsys):
    code, out, err = run_main(["bench", "roofline", *TINY, "--out", str(tmp_path)], capsys)
    assert code == 0, err
    assert "fraction of roofline" in out
    phases = read_csv(tmp_path / "roofline.csv")
    gemms = read_csv(tmp_path / "roofline_gemms.csv")
    assert (tmp_path / "roofline.png").stat().st_size > 0

    assert set(phases[0]) >= PHASE_COLUMNS
    assert [r["phase"] for r in phases] == [*PHASES, "iteration"]
    *parts, total = phases
    measured = [float(r["measured_s"]) for r in parts]
    assert all(t >= 0 for t in measured)  # nested timers never counted twice
    assert sum(measured) == pytest.approx(float(total["measured_s"]), rel=1e-6)
    assert float(total["bound_s"]) == pytest.approx(sum(float(r["bound_s"]) for r in parts))
    assert 0 < float(total["bound_s"]) <= float(total["shape_bound_s"]) * (1 + 1e-9)
    assert float(total["sps_measured"]) > 0 and float(total["peak_gflops"]) > 0

    assert set(gemms[0]) >= GEMM_COLUMNS
    for r in gemms:
        assert math.isfinite(float(r["gflops"])) and float(r["gflops"]) > 0
    n = {gemm_key(r): int(r["calls_per_iteration"]) for r in gemms}
    assert set(n) - {("reference", "fwd", 512, 512, 512)} == expected_gemms(64, 256, 4, 64, 2)
    assert n["rollout_policy", "fwd", 64, 64, 64] == 16  # 2 nets x 8 steps
    assert n["forward", "fwd", 256, 64, 64] == 8  # 2 nets x 2 epochs x 2 minibatches
    assert n["backward", "wgrad", 64, 256, 4] == 8


def test_shapes_follow_the_architecture():
    """Other widths and depths: the list comes from the policy's layers, not from a table."""
    from benchmarks.roofline import train_config
    from distrl.distributed import context
    from distrl.distributed.strategies import make_strategy
    from distrl.envs.registry import make_env
    from distrl.runner.on_policy import OnPolicyRunner

    args = RooflineArgs(
        envs=16,
        steps=2,
        epochs=1,
        minibatches=2,
        extra=("--policy.actor-hidden 32", "--policy.critic-hidden 16 8"),
    )
    cfg = train_config(args)
    ctx = context.init(cfg)
    runner = OnPolicyRunner(cfg, make_strategy(cfg, ctx), make_env(cfg, ctx.device))
    calls, layers = trace_gemms(runner, instrument(runner))
    fwd = {g for phase, g in calls if phase == "forward"}
    assert fwd == {Gemm("fwd", 16, *kn) for kn in [(4, 32), (32, 2), (4, 16), (16, 8), (8, 1)]}
    dgrad = {g for _, g in calls if g.kind == "dgrad"}
    assert dgrad == {Gemm("dgrad", 16, 2, 32), Gemm("dgrad", 16, 8, 16), Gemm("dgrad", 16, 1, 8)}
    assert layers["forward", Gemm("fwd", 16, 16, 8)] == {"critic.1"}
