"""Tensor-only samplers and log-probs against torch.distributions."""

from __future__ import annotations

import torch
from torch.distributions import Categorical, Normal

from distrl.policy import distributions as D


def test_categorical_sample_frequencies_and_logp() -> None:
    torch.manual_seed(0)
    base = torch.tensor([0.0, 1.0, -1.0])
    logits = base.expand(200_000, 3).contiguous()
    actions, logp = D.categorical_sample(logits)
    assert actions.dtype == torch.int64 and actions.shape == (200_000,)
    assert logp.shape == (200_000,)
    freq = torch.bincount(actions, minlength=3).double() / actions.numel()
    probs = torch.softmax(base.double(), -1)  # [0.2447, 0.6652, 0.0900]
    assert (freq - probs).abs().max().item() < 0.01
    ref = torch.log_softmax(logits, -1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    assert torch.equal(logp, ref)


def test_categorical_sample_extreme_logits_stay_in_range() -> None:
    torch.manual_seed(1)
    last = torch.tensor([[-100.0, -100.0, 100.0]]).expand(10_000, 3)
    first = torch.tensor([[100.0, -100.0, -100.0]]).expand(10_000, 3)
    assert bool((D.categorical_sample(last)[0] == 2).all())
    assert bool((D.categorical_sample(first)[0] == 0).all())


def test_categorical_logprob_entropy_matches_torch() -> None:
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(64, 5, generator=g) * 3
    actions = torch.randint(0, 5, (64,), generator=g)
    logp, ent = D.categorical_logprob_entropy(logits, actions)
    dist = Categorical(logits=logits)
    torch.testing.assert_close(logp, dist.log_prob(actions), rtol=0, atol=1e-5)
    torch.testing.assert_close(ent, dist.entropy(), rtol=0, atol=1e-5)
    # float actions (as stored) are accepted too
    logp_f, _ = D.categorical_logprob_entropy(logits, actions.float())
    assert torch.equal(logp_f, logp)


def test_gaussian_sample_logp_matches_normal() -> None:
    torch.manual_seed(3)
    mean = torch.randn(1000, 3)
    log_std = torch.randn(1000, 3) * 0.5
    actions, logp = D.gaussian_sample(mean, log_std)
    assert actions.shape == (1000, 3) and logp.shape == (1000,)
    ref = Normal(mean, log_std.exp()).log_prob(actions).sum(-1)
    torch.testing.assert_close(logp, ref, rtol=0, atol=1e-4)


def test_gaussian_sample_moments() -> None:
    torch.manual_seed(4)
    mean = torch.tensor([[1.0, -2.0]]).expand(100_000, 2)
    log_std = torch.tensor([[0.0, -1.0]]).expand(100_000, 2)
    actions, _ = D.gaussian_sample(mean, log_std)
    torch.testing.assert_close(actions.mean(0), torch.tensor([1.0, -2.0]), rtol=0, atol=0.02)
    torch.testing.assert_close(actions.std(0), torch.tensor([1.0, torch.e**-1]), rtol=0, atol=0.01)


def test_gaussian_logprob_entropy_matches_normal() -> None:
    g = torch.Generator().manual_seed(5)
    mean = torch.randn(50, 4, generator=g)
    log_std = (torch.randn(4, generator=g) * 0.3).expand(50, 4)  # shared, as in ActorCritic
    actions = torch.randn(50, 4, generator=g) * 2
    logp, ent = D.gaussian_logprob_entropy(mean, log_std, actions)
    dist = Normal(mean, log_std.exp())
    assert logp.shape == ent.shape == (50,)
    torch.testing.assert_close(logp, dist.log_prob(actions).sum(-1), rtol=0, atol=1e-4)
    torch.testing.assert_close(ent, dist.entropy().sum(-1), rtol=0, atol=1e-5)


def test_gaussian_entropy_gradient_flows_to_log_std() -> None:
    log_std = torch.zeros(2, requires_grad=True)
    mean = torch.zeros(3, 2)
    _, ent = D.gaussian_logprob_entropy(mean, log_std.expand_as(mean), torch.zeros(3, 2))
    ent.mean().backward()
    # H = sum(log_std) + const per row -> dH/dlog_std_i = 1
    assert log_std.grad.tolist() == [1.0, 1.0]
