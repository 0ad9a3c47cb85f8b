"""metaworld-mt10-ppo through the real launcher: multi-task PPO with PopArt on all ten MT10 tasks,
1 learner + 1 actor under torchrun, scored on MT10's held-out goals by --eval.interval; and the
strategies that cannot run PopArt refused before anything starts."""

from __future__ import annotations

import pytest
import torch

from distrl.checkpoint import load_checkpoint
from tests.distributed.workers import run_cli
from tests.helpers import BIN

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
QUIET = ["--threads", "1", "--progress", "False", "--tensorboard", "False"]
SMALL = ["--env.num-envs", "10", "--agent.num-steps", "20", "--agent.max-iterations", "2"]


@pytest.fixture(autouse=True)
def _metaworld():
    pytest.importorskip("metaworld", reason="metaworld-mt10-ppo needs the metaworld extra")


@pytest.mark.long
def test_popart_trains_under_learner_actor_and_is_scored_on_held_out_goals(tmp_path):
    run = tmp_path / "run"
    cmd = [str(BIN / "distrl"), "train", "metaworld-mt10-ppo", "--nproc", "2"]
    cmd += ["--dist.strategy", "learner-actor", *SMALL, *QUIET, "--run-dir", str(run)]
    cmd += ["--eval.interval", "2", "--eval.episodes", "1"]
    code, out, err, _ = run_cli(cmd, timeout=280, cwd=tmp_path)
    assert code == 0, out[-3000:] + err[-3000:]
    assert "held-out success" in out + err  # MT10's held-out goals, one episode per task
    state, _ = load_checkpoint(run / "checkpoints" / "ckpt_00000002.pt")
    policy = state["policy"]
    assert bool(policy["popart.seen"].all())  # every task's value targets were counted
    assert not torch.equal(policy["popart.sigma"], torch.ones(10))


@pytest.mark.parametrize("strategy", ["ps-bsp", "ps-asp"])
def test_parameter_servers_refuse_popart_before_starting(tmp_path, strategy):
    cmd = [str(BIN / "distrl"), "train", "metaworld-mt10-ppo", "--nproc", "3"]
    cmd += ["--dist.strategy", strategy, *SMALL, *QUIET, "--run-dir", str(tmp_path / "r")]
    code, out, err, seconds = run_cli(cmd, timeout=60, cwd=tmp_path)
    assert code != 0 and "PopArt rescales the critic's output layer" in err
    assert "--policy.popart-tasks 0" in err and not (tmp_path / "r").exists()
