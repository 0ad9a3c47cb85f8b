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


def test_gaussian_sample_with_given_draws_matches_normal() -> None:
    mean, log_std = torch.randn(6, 3), torch.randn(3).expand(6, 3)
    eps = torch.randn(6, 3)
    actions, logp = D.gaussian_sample(mean, log_std, eps)
    torch.testing.assert_close(actions, mean + log_std.exp() * eps)
    expected = Normal(mean, log_std.exp()).log_prob(actions).sum(-1)
    torch.testing.assert_close(logp, expected)


def _lag_correlation(x: torch.Tensor, lag: int) -> float:
    """Mean over sequences of x[t] x[t + lag] along the time axis (-2) of unit-variance noise."""
    return float((x[..., lag:, :] * x[..., :-lag, :]).mean())


def test_powerlaw_noise_is_unit_normal_and_correlated_by_beta() -> None:
    gen = torch.Generator().manual_seed(0)
    for steps in (200, 201):  # the even length has a real Nyquist coefficient
        white = D.powerlaw_noise((2000, 4), steps, 0.0, gen)
        pink = D.powerlaw_noise((2000, 4), steps, 1.0, gen)
        red = D.powerlaw_noise((2000, 4), steps, 2.0, gen)
        for x in (white, pink, red):
            assert x.shape == (2000, steps, 4) and x.dtype == torch.float32
            assert abs(float(x.mean())) < 0.05  # pink and red wander: their mean varies more
            # N(0, 1) at every step, first, middle and last alike
            for t in (0, steps // 2, steps - 1):
                assert abs(float(x[:, t].var()) - 1.0) < 0.08, (steps, t)
        assert abs(_lag_correlation(white, 1)) < 0.01
        assert abs(_lag_correlation(white, 10)) < 0.01
        # 1 / f^beta: the larger beta, the longer the memory
        assert 0.6 < _lag_correlation(pink, 1) < 0.8 and 0.2 < _lag_correlation(pink, 10) < 0.4
        assert _lag_correlation(red, 10) > 0.7
    a = D.powerlaw_noise((3, 2), 50, 1.0, torch.Generator().manual_seed(7))
    b = D.powerlaw_noise((3, 2), 50, 1.0, torch.Generator().manual_seed(7))
    assert torch.equal(a, b)  # a function of the generator alone
    assert D.powerlaw_noise((3, 2), 1, 1.0).shape == (3, 1, 2)
