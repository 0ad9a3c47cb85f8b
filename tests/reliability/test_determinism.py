"""Determinism on CPU: the same seed and world size give bitwise-identical parameters (1 and 2
ranks); another seed gives other parameters.

Single-process runs go through `cli.train_main` in this process. For 2 ranks, the session's
`distrl train --nproc 2` (torchrun) run is compared with a second 2-rank run whose ranks do what
torchrun's ranks do with the same argv (the launcher's argv: parse it, then run_training), forked
from a process that has imported torch already: the same computation, seconds cheaper.
"""

from __future__ import annotations

import pytest
import torch

from distrl import cli
from distrl.distributed import launch
from tests.helpers import assert_same, final_state, tiny_train_args
from tests.reliability.conftest import TWO_RANK_ITERS, two_rank_command
from tests.reliability.workers import cli_rank, run_group

ARGS = ["cartpole", *tiny_train_args(8, num_minibatches=2, max_iterations=3)]


def one_process(run_dir, seed: int) -> dict:
    assert cli.train_main([*ARGS, "--seed", str(seed), "--run-dir", str(run_dir)]) == 0
    return final_state(run_dir, 3)


@pytest.mark.timeout(60)
def test_one_process_same_seed_same_bits_other_seed_other_bits(tmp_path):
    a = one_process(tmp_path / "a", seed=7)
    b = one_process(tmp_path / "b", seed=7)
    c = one_process(tmp_path / "c", seed=8)
    assert_same(a, b)  # the whole checkpoint: parameters, optimizer, every RNG, env state
    for name, p in a["policy"].items():
        if p.dtype.is_floating_point and p.numel() > 1:  # not the normalizer's sample count
            assert not torch.equal(p, c["policy"][name]), f"{name} equal under another seed"


@pytest.mark.slow  # a torchrun launch and a forked 2-rank run: ~10 s (the golden test keeps
# 2-rank bits in test-fast)
@pytest.mark.timeout(120)
def test_two_ranks_same_seed_same_bits(two_rank_reference, tmp_path):
    run_dir = tmp_path / "run"
    argv = [*launch.strip_launch_flags(two_rank_command(run_dir)[2:]), "--distributed", "True"]
    results, codes, secs = run_group(cli_rank, 2, argv, timeout=80)
    print(f"2-rank run: {secs:.1f} s")
    assert codes == {0: 0, 1: 0}, results
    assert_same(
        final_state(run_dir, TWO_RANK_ITERS), final_state(two_rank_reference, TWO_RANK_ITERS)
    )
