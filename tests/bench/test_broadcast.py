"""`distrl bench broadcast`: the synthetic model's shape, and a tiny real run (3 Gloo ranks)."""

from __future__ import annotations

import pytest

from benchmarks.broadcast import model_numels
from tests.helpers import read_csv


@pytest.mark.parametrize("n", [1, 7, 86, 10_000, 100_000_001])
def test_model_numels_add_up(n):
    numels = model_numels(n)
    assert sum(numels) == n and min(numels) >= 0


@pytest.mark.slow  # starts rank groups for every shape: ~15 s
@pytest.mark.timeout(120)
def test_broadcast_command_tiny(tmp_path):
    from benchmarks.cli import bench_main

    out = tmp_path / "bc"
    args = ["broadcast", "--params", "1000,50000", "--learners", "1,2", "--actors", "1,2"]
    code = bench_main([*args, "--repeats", "2", "--backend", "gloo", "--out", str(out)])
    assert code == 0
    rows = read_csv(out / "broadcast.csv")
    assert len(rows) == 4 * 2 * 4  # shapes x sizes x methods
    assert {r["method"] for r in rows} == {"routing", "naive", "broadcast", "p2p"}
    assert all(float(r["time_median_s"]) > 0 for r in rows)
    two = [r for r in rows if r["L"] == "2" and r["method"] == "routing"]
    assert all(float(r["makespan_over_lb"]) <= 4 / 3 + 1e-9 for r in two)
    assert (out / "broadcast.png").exists()


def test_the_pattern_catches_a_wrong_byte_and_a_misplaced_chunk():
    import torch

    from benchmarks.broadcast import _BLOCK, fill_pattern, has_pattern

    flat = torch.empty(_BLOCK + 1000)  # a partial last block
    fill_pattern(flat)
    assert has_pattern(flat)
    bits = flat.view(torch.int32)
    bits[_BLOCK + 500] ^= 1  # one bit of one element, in the last block
    assert not has_pattern(flat)
    fill_pattern(flat)
    flat[:100], flat[100:200] = flat[100:200].clone(), flat[:100].clone()  # two chunks swapped
    assert not has_pattern(flat)
    assert has_pattern(torch.empty(0))
