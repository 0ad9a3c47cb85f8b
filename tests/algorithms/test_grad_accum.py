"""``--agent.grad-accum K``: each minibatch's gradient in K chunks, one backward after another,
then one step on their row-weighted mean (RIPT's grad_accum). The runs end where those without
it do, to float rounding, for PPO and for episodic RLOO; it is refused where it cannot apply."""

from __future__ import annotations

import pytest
import torch

from distrl.args import parse_train_args
from distrl.telemetry import read_metrics
from tests.helpers import QUIET, api_train, final_state


def params(run_dir, iteration: int) -> dict[str, torch.Tensor]:
    return final_state(run_dir, iteration)["policy"]


@pytest.mark.parametrize("chunks", [2, 3])  # 3 does not divide the 64-row minibatches
def test_ppo_with_accumulated_gradients_ends_where_whole_minibatches_do(tmp_path, chunks):
    agent = {"num_minibatches": 2, "max_iterations": 3, "lr_schedule": "constant"}
    api_train("cartpole", tmp_path / "whole", agent=agent, seed=5)
    api_train("cartpole", tmp_path / "parts", agent={**agent, "grad_accum": chunks}, seed=5)
    whole, parts = params(tmp_path / "whole", 3), params(tmp_path / "parts", 3)
    assert whole.keys() == parts.keys()
    for key, value in whole.items():
        torch.testing.assert_close(parts[key], value, rtol=1e-4, atol=1e-6, msg=key)
    # the decision scalars too: Adam and the norm clip would hide a sum taken for a mean
    for a, b in zip(*(read_metrics(tmp_path / n) for n in ("whole", "parts")), strict=True):
        for key in ("approx_kl", "loss/policy", "loss/value", "loss/entropy", "clipfrac"):
            assert b[key] == pytest.approx(a[key], rel=1e-3, abs=1e-6), key


def test_episodic_rloo_with_accumulated_gradients_ends_where_whole_minibatches_do(tmp_path):
    agent = {"max_iterations": 2, "lr_schedule": "constant", "num_epochs": 1}
    multitask = {"tasks": ("reach-east", "reach-west"), "group_size": 4}
    runs = {}
    for name, extra in (("whole", {}), ("parts", {"grad_accum": 2})):
        api_train("reach10", tmp_path / name, num_envs=8, agent={**agent, **extra},
                  multitask=multitask, seed=2)  # fmt: skip
        runs[name] = params(tmp_path / name, 2)
    for key, value in runs["whole"].items():
        torch.testing.assert_close(runs["parts"][key], value, rtol=1e-4, atol=1e-6, msg=key)


@pytest.mark.parametrize(
    "argv, says",
    [
        (["cartpole", "--agent.grad-accum", "0"], "--agent.grad-accum must be positive"),
        (["cartpole-novel", "--agent.grad-accum", "2"], "whole sequences"),
        (["cartpole", "--agent.grad-accum", "2", "--dist.overlap", "True"], "drop one of them"),
    ],
)
def test_a_grad_accum_that_cannot_apply_is_refused(argv, says, tmp_path):
    with pytest.raises(ValueError, match=says):
        parse_train_args([*argv, "--run-dir", str(tmp_path), *QUIET])


def test_the_off_policy_learners_refuse_it(tmp_path):
    from distrl.session import run_training

    cfg = parse_train_args(["cartpole", "--algorithm", "dqn", "--agent.grad-accum", "2",
                            "--run-dir", str(tmp_path), *QUIET])  # fmt: skip
    with pytest.raises(ValueError, match="--agent.grad-accum applies to"):
        run_training(cfg)
