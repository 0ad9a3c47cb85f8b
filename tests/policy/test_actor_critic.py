"""ActorCritic shapes, action clipping, act/evaluate consistency and initialization."""

from __future__ import annotations

import math

import pytest
import torch

from distrl.config import PolicyConfig
from distrl.envs.core import ActionSpace
from distrl.policy.actor_critic import ActorCritic
from distrl.policy.normalizer import Moments

DISCRETE = ActionSpace("discrete", n=2)
CONT = ActionSpace("continuous", low=(-2.0,), high=(2.0,))
CONT2 = ActionSpace("continuous", low=(-1.0, 0.0), high=(1.0, 3.0))
CFG = PolicyConfig(actor_hidden=(16, 16), critic_hidden=(8,))
OBS_DIM, N = 3, 5


def make(space: ActionSpace, cfg: PolicyConfig = CFG, seed: int = 0) -> ActorCritic:
    torch.manual_seed(seed)
    return ActorCritic(OBS_DIM, space, cfg)


def test_discrete_shapes() -> None:
    pol = make(DISCRETE)
    obs = torch.randn(N, OBS_DIM)
    a, logp, v = pol.act(obs)
    assert a.shape == (N,) and a.dtype == torch.int64
    assert bool(((a == 0) | (a == 1)).all())
    assert logp.shape == (N,) and v.shape == (N,)
    lp, ent, v2 = pol.evaluate(obs, a)
    assert lp.shape == ent.shape == v2.shape == (N,)
    assert pol.value(obs).shape == (N,)
    assert torch.equal(pol.env_action(a), a)
    d = pol.act_deterministic(obs)
    assert d.shape == (N,)
    assert torch.equal(d, pol.actor(pol.normalizer(obs)).argmax(-1))


@pytest.mark.parametrize("space", [CONT, CONT2])
def test_continuous_shapes(space: ActionSpace) -> None:
    pol = make(space)
    obs = torch.randn(N, OBS_DIM)
    a, logp, v = pol.act(obs)
    assert a.shape == (N, space.dim) and a.dtype == torch.float32
    assert logp.shape == (N,) and v.shape == (N,)
    lp, ent, v2 = pol.evaluate(obs, a)
    assert lp.shape == ent.shape == v2.shape == (N,)
    assert pol.value(obs).shape == (N,)
    assert pol.act_deterministic(obs).shape == (N, space.dim)


def test_env_action_clips_continuous() -> None:
    pol = make(CONT)
    a = torch.tensor([[-5.0], [0.5], [3.0], [-2.0], [2.0]])
    assert pol.env_action(a).tolist() == [[-2.0], [0.5], [2.0], [-2.0], [2.0]]
    pol2 = make(CONT2)
    a2 = torch.tensor([[-3.0, -1.0], [0.25, 5.0], [2.0, 1.5]])
    assert pol2.env_action(a2).tolist() == [[-1.0, 0.0], [0.25, 3.0], [1.0, 1.5]]
    # act returns unclipped samples (their log-prob must match); big std makes some exceed 2
    pol.log_std.data.fill_(2.0)
    a, _, _ = pol.act(torch.randn(200, OBS_DIM))
    assert a.abs().max() > 2.0
    assert pol.env_action(a).abs().max() <= 2.0
    # deterministic action is the clipped mean
    pol.actor[-1].bias.data.fill_(10.0)
    assert pol.act_deterministic(torch.randn(4, OBS_DIM)).tolist() == [[2.0]] * 4


def test_evaluate_reproduces_act_discrete() -> None:
    pol = make(DISCRETE)
    pol.normalizer.update(Moments.of(torch.randn(100, OBS_DIM) * 3 + 1))
    obs = torch.randn(64, OBS_DIM)
    with torch.no_grad():
        a, logp, v = pol.act(obs)
        lp, _, v2 = pol.evaluate(obs, a)
    assert torch.equal(lp, logp)
    assert torch.equal(v, v2)


def test_evaluate_reproduces_act_continuous() -> None:
    pol = make(CONT2)
    pol.log_std.data.copy_(torch.tensor([0.3, -0.7]))
    obs = torch.randn(64, OBS_DIM)
    with torch.no_grad():
        a, logp, v = pol.act(obs)
        lp, _, v2 = pol.evaluate(obs, a)
    torch.testing.assert_close(lp, logp, rtol=0, atol=1e-5)
    assert torch.equal(v, v2)


def test_entropy_is_near_max_at_init_discrete() -> None:
    # policy head gain 0.01 -> near-uniform initial policy: H ~ log 2
    pol = make(DISCRETE)
    with torch.no_grad():
        _, ent, _ = pol.evaluate(torch.randn(32, OBS_DIM), torch.zeros(32, dtype=torch.long))
    torch.testing.assert_close(ent, torch.full((32,), math.log(2.0)), rtol=0, atol=1e-3)


def test_orthogonal_init() -> None:
    pol = make(ActionSpace("discrete", n=4), PolicyConfig(actor_hidden=(16, 16)))
    head = pol.actor[-1]
    # orthogonal rows scaled by the gain 0.01: W W^T = 1e-4 I (4 rows <= 16 columns)
    torch.testing.assert_close(
        head.weight.detach() @ head.weight.detach().T, 1e-4 * torch.eye(4), rtol=0, atol=1e-8
    )
    assert float(head.weight.detach().norm()) == pytest.approx(0.01 * 2.0, rel=1e-4)  # 0.01 sqrt(4)
    assert bool((head.bias == 0).all())
    vhead = pol.critic[-1]
    assert float(vhead.weight.detach().norm()) == pytest.approx(1.0, rel=1e-4)  # gain 1, one row
    hidden = pol.actor[0]  # [16, 3]: orthonormal columns scaled by sqrt(2)
    torch.testing.assert_close(
        hidden.weight.detach().T @ hidden.weight.detach(),
        2.0 * torch.eye(OBS_DIM),
        rtol=0,
        atol=1e-5,
    )
    assert bool((hidden.bias == 0).all())


def test_log_std_init_and_parameters() -> None:
    pol = make(CONT2, PolicyConfig(init_log_std=-0.5))
    assert pol.log_std.tolist() == [-0.5, -0.5]
    assert any(p is pol.log_std for p in pol.parameters())
    assert not hasattr(make(DISCRETE), "log_std")
    # normalizer statistics are buffers, not parameters
    names = {n for n, _ in pol.named_parameters()}
    assert not any(n.startswith("normalizer") for n in names)
    assert "normalizer.mean64" in dict(pol.named_buffers())


def test_obs_normalization_flag() -> None:
    pol = make(DISCRETE, PolicyConfig(obs_normalization=False))
    assert not pol.normalizer.enabled
    pol_on = make(DISCRETE)
    assert pol_on.normalizer.enabled
    # with statistics, the policy sees normalized inputs: shifting both obs and stats is a no-op
    obs = torch.randn(8, OBS_DIM)
    pol_on.normalizer.update(Moments.of(obs))
    other = make(DISCRETE)
    other.normalizer.update(Moments.of(obs + 100.0))
    torch.testing.assert_close(pol_on.value(obs), other.value(obs + 100.0), rtol=0, atol=1e-4)
