"""One ``--seed``, the same worker data, whatever the strategy: a parameter server's workers seed
their envs as the all-reduce ranks they stand in for (worker r as rank r - 1), so
``--nproc 2`` all-reduce and ``--nproc 3 --dist.strategy ps-bsp`` train on the same rollouts
and, BSP reproducing all-reduce, end with the same weights. Through the real launcher."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from distrl.checkpoint import find_latest_valid, load_checkpoint
from tests.distributed.workers import run_cli
from tests.helpers import BIN

pytestmark = pytest.mark.slow

SMALL = ["--env.num-envs", "16", "--agent.num-steps", "16", "--agent.max-iterations", "6"]
QUIET = ["--threads", "1", "--progress", "False", "--tensorboard", "False", "--seed", "7"]


def final_policy(tmp_path: Path, name: str, flags: list[str]) -> dict[str, torch.Tensor]:
    run = tmp_path / name
    cmd = [str(BIN / "distrl"), "train", "cartpole", *flags, *SMALL, *QUIET, "--run-dir", str(run)]
    code, out, err, _ = run_cli(cmd, timeout=150, cwd=tmp_path)
    assert code == 0, out[-3000:] + err[-3000:]
    path, _ = find_latest_valid(run / "checkpoints")
    assert path is not None
    state, manifest = load_checkpoint(path, map_location="cpu")
    assert manifest["iteration"] == 6
    return state["policy"]


@pytest.mark.long  # 19 s: make test keeps to about 10 minutes; CI runs it
@pytest.mark.timeout(320)
def test_bsp_with_the_same_seed_ends_where_allreduce_does(tmp_path):
    allreduce = final_policy(tmp_path, "allreduce", ["--nproc", "2"])
    bsp = final_policy(tmp_path, "bsp", ["--nproc", "3", "--dist.strategy", "ps-bsp"])
    assert allreduce.keys() == bsp.keys()
    worst = max(float((allreduce[k] - bsp[k]).abs().max()) for k in allreduce)
    assert worst <= 1e-5, f"max |allreduce - ps-bsp| = {worst}"
