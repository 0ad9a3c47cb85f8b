"""Advantage estimators as pure functions.

GAE (Schulman et al. 2016, "High-Dimensional Continuous Control Using Generalized Advantage
Estimation"), with terminated and truncated kept apart:

    delta_t = r_t + gamma * [ (1 - done_t) V(s_{t+1}) + truncated_t V(s_final_t) ] - V(s_t)
    A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1},    done = terminated | truncated

A terminated step bootstraps from nothing (also when the time limit falls on it); a truncated
one from V(final observation), never from the reset state that follows it.

RLOO (Kool et al. 2019, "Buy 4 REINFORCE Samples, Get a Baseline for Free!"): for k episodes
from the same start, A_i = R_i - mean_{j != i} R_j.
"""

from __future__ import annotations

import torch


def _episode_ends(
    terminated: torch.Tensor, truncated: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """(not_done, truncated_only) [T, N] as ``dtype``: 0 after any episode end; 1 where an
    episode was truncated and not terminated (bootstrap from V(final_obs) there; a step that is
    both terminated and truncated gets no bootstrap)."""
    term = terminated.to(dtype)
    trunc = truncated.to(dtype)
    return 1.0 - torch.maximum(term, trunc), trunc * (1.0 - term)


def _next_values(
    values: torch.Tensor,
    last_values: torch.Tensor,
    not_done: torch.Tensor,
    trunc: torch.Tensor,
    final_values: torch.Tensor,
) -> torch.Tensor:
    """The value after each step [T, N]: ``values`` of the next step (``last_values`` after the
    last) within an episode, V(final_obs) after a truncation, 0 after a termination."""
    following = torch.cat([values[1:], last_values.unsqueeze(0)], 0)
    return not_done * following + trunc * final_values


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    final_values: torch.Tensor,
    last_values: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns [T, N].

    rewards, values, terminated, truncated, final_values: [T, N]; final_values holds
    V(final_obs) where truncated (other entries are ignored); last_values: V(s_T) [N].
    """
    T = rewards.shape[0]
    not_done, trunc = _episode_ends(terminated, truncated, rewards.dtype)
    deltas = rewards + gamma * _next_values(values, last_values, not_done, trunc, final_values)
    deltas = deltas - values
    discounts = gamma * lam * not_done
    adv = torch.empty_like(rewards)
    running = torch.zeros_like(last_values)
    for t in range(T - 1, -1, -1):  # T is small (16-256); N is the wide axis
        running = deltas[t] + discounts[t] * running
        adv[t] = running
    return adv, adv + values


def vtrace(
    rewards: torch.Tensor,
    values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    final_values: torch.Tensor,
    last_values: torch.Tensor,
    log_rhos: torch.Tensor,
    gamma: float,
    lam: float,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """V-trace (IMPALA, Espeholt et al. 2018) for rollouts collected by an older policy:
    (policy-gradient advantages, value targets v_s), both [T, N].

    ``values``/``final_values``/``last_values`` come from the current critic, ``log_rhos`` =
    log pi(a|s) - log mu(a|s) (current over behaviour policy). With rho_t = min(rho_bar,
    e^log_rho) and c_t = lam * min(c_bar, e^log_rho):

        v_s - V(s) = rho_s delta_s + gamma c_s (v_{s+1} - V(s+1)),
        delta_s = r_s + gamma V(s+1) - V(s),
        A_s = rho_s (r_s + gamma v_{s+1} - V(s)),

    with episode ends as in ``gae``: no bootstrap after ``terminated``, V(final_obs) after
    ``truncated`` (where v_{s+1} is V(final_obs) too: the trace stops at the boundary). On
    policy (log_rhos = 0) v_s is exactly GAE(lambda)'s return."""
    T = rewards.shape[0]
    not_done, trunc = _episode_ends(terminated, truncated, rewards.dtype)
    ratio = log_rhos.exp()
    rho = ratio.clamp(max=rho_bar)
    c = lam * ratio.clamp(max=c_bar)
    boot = _next_values(values, last_values, not_done, trunc, final_values)
    deltas = rho * (rewards + gamma * boot - values)
    acc = torch.empty_like(rewards)
    running = torch.zeros_like(last_values)
    for t in range(T - 1, -1, -1):
        running = deltas[t] + gamma * c[t] * not_done[t] * running
        acc[t] = running
    vs = values + acc
    boot_vs = _next_values(vs, last_values, not_done, trunc, final_values)
    return rho * (rewards + gamma * boot_vs - values), vs


def rloo(returns: torch.Tensor) -> torch.Tensor:
    """Leave-one-out advantages for returns [G, k] (G groups of k samples from one start)."""
    k = returns.shape[-1]
    if k < 2:
        raise ValueError(f"RLOO needs at least 2 samples per group, got k={k}")
    total = returns.sum(-1, keepdim=True)
    return returns - (total - returns) / (k - 1)
