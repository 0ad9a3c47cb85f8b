"""Action distributions as plain tensor functions (no ``torch.distributions`` in the hot path).

Categorical sampling by inverse CDF: a = #{k < K-1 : cdf_k < u}, u ~ U(0, 1), which is exact and
costs one softmax, one cumsum and one comparison. Multi-discrete actions (K independent choices of
sizes nvec) take their logits side by side, [N, sum(nvec)]: the distribution is the product of
the K categoricals, so log pi(a|s) = sum_k log pi_k(a_k|s) and the entropy is the sum of theirs.
Diagonal Gaussian: a = mu + sigma * eps, eps white by default, or given (``powerlaw_noise``:
correlated in time, still N(0, 1) at each step).
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


def multi_categorical_sample(
    logits: torch.Tensor, nvec: tuple[int, ...]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample actions [N, K] (int64) and their log-probabilities [N] (the sum over the K
    choices) from logits [N, sum(nvec)], the k-th choice's nvec[k] logits side by side."""
    parts = [categorical_sample(x) for x in logits.split(nvec, dim=-1)]
    actions = torch.stack([a for a, _ in parts], -1)
    return actions, torch.stack([lp for _, lp in parts], -1).sum(-1)


def multi_categorical_logprob_entropy(
    logits: torch.Tensor, actions: torch.Tensor, nvec: tuple[int, ...]
) -> tuple[torch.Tensor, torch.Tensor]:
    """log pi(a|s) [N] and entropy [N] of the product of K categoricals: logits
    [N, sum(nvec)], actions [N, K]; both are sums over the choices."""
    logp = entropy = torch.zeros((), device=logits.device)
    for k, x in enumerate(logits.split(nvec, dim=-1)):
        lp, ent = categorical_logprob_entropy(x, actions[..., k])
        logp, entropy = logp + lp, entropy + ent
    return logp, entropy


def multi_categorical_mode(logits: torch.Tensor, nvec: tuple[int, ...]) -> torch.Tensor:
    """The most likely action [N, K]: each choice's argmax."""
    return torch.stack([x.argmax(-1) for x in logits.split(nvec, dim=-1)], -1)


def gaussian_sample(
    mean: torch.Tensor, log_std: torch.Tensor, eps: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample actions [N, A] and log-probabilities [N] from N(mean, exp(log_std)^2); ``eps``
    [N, A] is the standard normal draw to use (default: fresh white noise)."""
    if eps is None:
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


def powerlaw_noise(
    shape: tuple[int, ...], steps: int, beta: float, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Gaussian noise [*shape[:-1], steps, shape[-1]] whose power spectrum along time (the
    steps axis) falls as 1 / f^beta: beta 0 is white (iid), 1 pink, 2 red (a random walk's).
    Every element is N(0, 1) exactly; only the correlation between steps depends on beta.

    Timmer and Koenig's method (1995): random Fourier coefficients scaled by f^(-beta / 2),
    the zero frequency given the lowest one's scale (1 / steps), then the inverse real FFT
    divided by the standard deviation that gives. Colored action noise for PPO: Hollenstein et
    al. 2024, "Colored Noise in PPO: Improved Exploration and Performance through Correlated
    Action Sampling"."""
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    freqs = torch.fft.rfftfreq(steps, dtype=torch.float64)
    freqs[0] = 1.0 / steps  # no infinite power at f = 0
    scale = freqs ** (-beta / 2.0)
    # Coefficients 0 and (even steps) steps / 2 are real: they take all of their power in the
    # real part, twice a complex one's real part (so that beta 0 is exactly white).
    real_only = torch.zeros_like(scale, dtype=torch.bool)
    real_only[0] = True
    if steps % 2 == 0:
        real_only[-1] = True
    scale = torch.where(real_only, scale * 2.0**0.5, scale)
    *lead, width = shape
    size = (*lead, width, scale.numel())
    real = torch.randn(size, generator=generator, dtype=torch.float64) * scale
    imag = torch.randn(size, generator=generator, dtype=torch.float64) * scale
    imag = torch.where(real_only, 0.0, imag)
    # Var x_t = (sum over the real-only k of scale_k^2 + 4 x that over the others) / steps^2
    var = (torch.where(real_only, 1.0, 4.0) * scale**2).sum() / steps**2
    out = torch.fft.irfft(torch.complex(real, imag), n=steps) / var.sqrt()
    return out.to(torch.float32).transpose(-1, -2).contiguous()
