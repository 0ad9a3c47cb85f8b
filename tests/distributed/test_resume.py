"""A distributed resume must equal an uninterrupted distributed run, tensor for tensor, and it
must restore every rank's own state (envs, RNG, observations), not only rank 0's."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from distrl.telemetry import read_metrics
from tests.distributed.workers import run_cli
from tests.helpers import BIN, assert_same, final_state, tiny_train_args

SMALL = tiny_train_args(16, save_interval=2)


def train(run_dir: Path, iterations: int, *extra: str) -> str:
    args = f"train cartpole --nproc 2 --agent.max-iterations {iterations} --run-dir {run_dir}"
    cmd = [str(BIN / "distrl"), *args.split(), *SMALL, *extra]
    code, out, err, secs = run_cli(cmd, timeout=100)
    print(f"{' '.join(cmd[1:])}: {secs:.1f} s")
    assert code == 0, out + err
    return out


@pytest.mark.slow  # three 2-rank launches through torchrun: ~30 s
@pytest.mark.timeout(240)
def test_distributed_resume_equals_uninterrupted_run(tmp_path):
    a, b = tmp_path / "A", tmp_path / "B"
    # A and B's first half are independent: run them side by side (much of a launch is waiting)
    with ThreadPoolExecutor(2) as pool:
        for f in [pool.submit(train, a, 4), pool.submit(train, b, 2)]:
            f.result()
    out = train(b, 4, "--resume", "auto")
    assert "resume: loaded" in out and "at iteration 2" in out, out

    full, resumed = final_state(a, 4, world_size=2), final_state(b, 4, world_size=2)
    assert resumed["iteration"] == full["iteration"] == 4
    assert resumed["env_steps"] == 4 * 2 * 16 * 8
    assert_same(resumed["policy"], full["policy"], "policy")
    assert_same(resumed["ppo"], full["ppo"], "ppo")

    # per-rank state: two entries, distinct (rank-offset seeds), each restored exactly
    assert len(resumed["ranks"]) == len(full["ranks"]) == 2
    assert not torch.equal(resumed["ranks"][0]["obs"], resumed["ranks"][1]["obs"])
    for r in range(2):
        assert_same(resumed["ranks"][r]["env"], full["ranks"][r]["env"], f"ranks[{r}].env")
        assert torch.equal(resumed["ranks"][r]["obs"], full["ranks"][r]["obs"])
        assert torch.equal(resumed["ranks"][r]["window"], full["ranks"][r]["window"])
        assert torch.equal(resumed["ranks"][r]["rng"]["torch"], full["ranks"][r]["rng"]["torch"])
    # the checkpoint the resume started from held both ranks too
    assert len(final_state(b, 2, world_size=2)["ranks"]) == 2

    steps = [(r["iteration"], r["env_steps"]) for r in read_metrics(b)]
    assert steps == [(i, i * 2 * 16 * 8) for i in range(1, 5)]
    full_ret = [r["episode_return_mean"] for r in read_metrics(a)]
    assert [r["episode_return_mean"] for r in read_metrics(b)] == full_ret
