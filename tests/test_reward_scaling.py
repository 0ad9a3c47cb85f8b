"""Reward scaling by the running std of the discounted return (``--policy.reward-normalization``):
the collector's per-env G follows its recurrence, the stored rewards are scaled by the statistics
agreed after the previous rollout, and the logged episode returns stay raw."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from distrl.config import PolicyConfig
from distrl.distributed import context
from distrl.distributed.strategies import make_strategy
from distrl.envs.registry import make_env
from distrl.policy.normalizer import Moments, ReturnScale
from distrl.runner.on_policy import OnPolicyRunner
from tests.distributed.workers import small_config


def test_return_scale_divides_by_the_return_std_and_clips() -> None:
    scale = ReturnScale(clip=10.0)
    r = torch.tensor([0.5, -3.0, 400.0])
    assert torch.equal(scale(r.clone()), torch.tensor([0.5, -3.0, 10.0]))  # unit scale at first
    G = torch.tensor([[1.0], [3.0], [5.0], [7.0]], dtype=torch.float64)
    scale.update(Moments.of(G))
    std = G.var(unbiased=False).sqrt()  # population variance, like Gymnasium's RunningMeanStd
    expected = (r / std.float()).clamp(-10, 10)
    torch.testing.assert_close(scale(r.clone()), expected, rtol=1e-6, atol=0)


@pytest.mark.timeout(60)
def test_collector_scales_rewards_with_the_previous_rollouts_return_std() -> None:
    cfg = small_config(16, distributed=False, policy=PolicyConfig(reward_normalization=True))
    cfg = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, max_episode_steps=5))
    ctx = context.init(cfg)
    try:
        runner = OnPolicyRunner(cfg, make_strategy(cfg, ctx), make_env(cfg, ctx.device))
        c, gamma = runner.collector, cfg.agent.gamma
        c.rollout(0)
        buf = c.buffer
        assert torch.equal(buf.rewards, torch.ones_like(buf.rewards))  # cartpole: +1, unit scale
        G = torch.zeros(16)
        for t in range(buf.num_steps):  # G_t = gamma G_{t-1} + r_t, restarting after a done
            G = gamma * G + 1.0
            torch.testing.assert_close(c.disc_returns[t], G)
            G = G.masked_fill(buf.terminated[t] | buf.truncated[t], 0.0)
        assert buf.truncated.any()  # episodes of 5 steps end inside an 8-step rollout
        first = c.disc_returns.clone()
        m = runner.learn_step()
        std = first.double().var(unbiased=False).sqrt()
        c.rollout(1)
        torch.testing.assert_close(buf.rewards, torch.full_like(buf.rewards, float(1 / std)))
        # the logged episode returns are raw: each 5-step cartpole episode returns 5 (or less)
        assert m["episode_return_mean"] is not None and 1 <= m["episode_return_mean"] <= 5
    finally:
        context.shutdown()


def test_reward_scaling_is_refused_for_episodic_suites() -> None:
    from distrl.args import parse_train_args
    from distrl.session import check_before_start

    cfg = parse_train_args(["reach10", "--policy.reward-normalization", "True"])
    with pytest.raises(ValueError, match="does not apply to reach10"):
        check_before_start(cfg)
