"""Action distributions as plain tensor functions (no ``torch.distributions`` in the hot path).

Categorical sampling by inverse CDF: a = #{k < K-1 : cdf_k < u}, u ~ U(0, 1), which is exact and
costs one softmax, one cumsum and one comparison. Diagonal Gaussian: a = mu + sigma * eps.
"""

from __future__ import annotations

import math

import torch

_LOG_2PI = math.log(2.0 * math.pi)


def categorical_sample(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample actions [N] (int64) and their log-probabilities [N] from logits [N, K]."""
    logp = torch.log_softmax(logits, dim=-1)
    cdf = logp.exp().cumsum_(-1)
    u = torch.rand_like(cdf[:, :1])
    actions = (cdf[:, :-1] < u).sum(-1)
    return actions, logp.gather(-1, actions.unsqueeze(-1)).squeeze(-1)


def categorical_logprob_entropy(
    logits: torch.Tensor, actions: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """log pi(a|s) [N] and entropy [N] for logits [N, K], actions [N]."""
    logp = torch.log_softmax(logits, dim=-1)
    entropy = -(logp.exp() * logp).sum(-1)
    return logp.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1), entropy


def gaussian_sample(mean: torch.Tensor, log_std: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample actions [N, A] and log-probabilities [N] from N(mean, exp(log_std)^2)."""
    eps = torch.randn_like(mean)
    actions = mean + log_std.exp() * eps
    logp = -0.5 * (eps**2).sum(-1) - log_std.sum(-1) - 0.5 * _LOG_2PI * mean.shape[-1]
    return actions, logp


def gaussian_logprob_entropy(
    mean: torch.Tensor, log_std: torch.Tensor, actions: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """log N(a; mean, sigma) [N] and entropy [N] of a diagonal Gaussian."""
    z = (actions - mean) * torch.exp(-log_std)
    d = mean.shape[-1]
    logp = -0.5 * (z**2).sum(-1) - log_std.sum(-1) - 0.5 * _LOG_2PI * d
    entropy = (log_std.sum(-1) + 0.5 * d * (1.0 + _LOG_2PI)).expand(mean.shape[0])
    return logp, entropy
