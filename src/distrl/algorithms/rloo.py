"""The episodic RLOO objective of RIPT (Tan et al. 2025, "Interactive Post-Training for
Vision-Language-Action Models"), built on RLOO (Kool et al. 2019, "Buy 4 REINFORCE Samples, Get a
Baseline for Free!") and the PPO-Clip loss (Schulman et al. 2017).

Episodes come in groups of ``K`` rollouts that share an init state; episode ``e`` belongs to group
``e // K`` (the order ``storage.episodes.collect_episodes`` produces). Per episode:

    A_i = R_i - mean_{j != i} R_j                      (leave-one-out baseline, within a group)

and every valid step of episode ``i`` gets ``A_i`` (steps past its length are masked out).
Dynamic sampling (RIPT section 3.3) drops the groups whose ``K`` rewards are all equal: their
advantages are all zero, so they only dilute the batch.

The loss is a mean over valid steps, so an episode weighs by its length. Where success ends an
episode, a failure (the full horizon) then outweighs a success several times over, and most of
the update pushes away from failures' actions rather than towards the successes'. With
``equal_episodes`` each step's advantage is scaled by ``mean kept length / its episode's
length``: every kept episode then carries the same total weight, and the kept steps' mean
weight stays 1 (PPO-Clip's objective is linear in a positive scale of ``A``, so this is exactly
a per-episode weighting; cf. the length bias discussed for GRPO by Liu et al. 2025,
"Understanding R1-Zero-Like Training").

The policy loss is PPO-Clip's ``pg_loss`` over the valid steps (masked mean), computed by
``algorithms.ppo.ppo_loss`` itself so both objectives share one clip formula; RLOO has no critic,
so the value term is switched off (``vf_coef = 0``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from distrl.algorithms.ppo import ppo_loss
from distrl.storage.advantages import rloo
from distrl.storage.episodes import step_mask


def _groups(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """[E] episode rewards as [G, K] groups (episode e in group e // K)."""
    if rewards.dim() != 1:
        raise ValueError(f"episode rewards must be [E], got shape {tuple(rewards.shape)}")
    if group_size < 1 or rewards.shape[0] % group_size:
        raise ValueError(
            f"{rewards.shape[0]} episodes do not split into groups of {group_size} "
            f"(data_batch_size must be a multiple of the RLOO group size)"
        )
    return rewards.reshape(-1, group_size)


def episode_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Leave-one-out advantages [E] for episode rewards [E] grouped by ``group_size`` (K >= 2)."""
    return rloo(_groups(rewards, group_size)).reshape(-1)


def uniform_groups(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """[G] bool: groups whose K rewards are all equal (exactly; rewards are success flags or
    sums of the same shaped terms, so equal outcomes give equal floats)."""
    g = _groups(rewards, group_size)
    return (g == g[:, :1]).all(dim=1)


@dataclass
class EpisodeAdvantages:
    """What the RLOO update consumes: per-step advantages, the valid-step mask, and counts."""

    advantages: torch.Tensor  # [E, T]: A_e on every step of episode e, 0 on masked steps
    mask: torch.Tensor  # [E, T] bool: valid steps of kept episodes
    episode_advantages: torch.Tensor  # [E]
    kept: torch.Tensor  # [E] bool: episode not in a dropped group
    num_dropped_groups: int


def rloo_advantages(
    rewards: torch.Tensor,
    lengths: torch.Tensor,
    max_steps: int,
    group_size: int,
    drop_uniform: bool = False,
    equal_episodes: bool = False,
) -> EpisodeAdvantages:
    """RLOO advantages spread over each episode's steps.

    rewards: [E] per-episode reward (success flag or return); lengths: [E] steps per episode
    (1..max_steps). With ``drop_uniform`` the groups whose K rewards are all equal are masked
    out and counted in ``num_dropped_groups`` (one host sync for the count). With
    ``equal_episodes`` episode e's steps carry ``A_e * mean_kept_length / length_e`` (see the
    module doc); ``episode_advantages`` stays ``A_e``.
    """
    adv = episode_advantages(rewards, group_size)
    if drop_uniform:
        dropped = uniform_groups(rewards, group_size)
        kept = (~dropped).repeat_interleave(group_size)
        num_dropped = int(dropped.sum())
    else:
        kept = torch.ones_like(rewards, dtype=torch.bool)
        num_dropped = 0
    mask = step_mask(lengths, max_steps) & kept.unsqueeze(1)
    per_step = adv
    if equal_episodes and bool(kept.any()):
        length = lengths.to(adv.dtype)
        per_step = adv * (length[kept].mean() / length)
    zero = torch.zeros((), dtype=adv.dtype, device=adv.device)
    steps = torch.where(mask, per_step.unsqueeze(1), zero)
    return EpisodeAdvantages(steps, mask, adv, kept, num_dropped)


def rloo_policy_loss(
    new_logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_coef: float,
    entropy: torch.Tensor | None = None,
    ent_coef: float = 0.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO-Clip policy loss, masked mean over the valid steps (inputs [E, T], mask bool).

        loss = mean_{valid}( max(-A r, -A clip(r, 1-eps, 1+eps)) ) - ent_coef mean_{valid}(H)

    Stats: ``pg_loss``, ``entropy``, ``approx_kl``, ``clipfrac`` (over valid steps) and
    ``valid_steps``. With no valid step (every group dropped) the loss is an exact zero that is
    still connected to ``new_logp``, so backward runs and gradient all-reduces stay in step
    across ranks.
    """
    n = int(mask.sum())  # host sync: boolean indexing needs the count anyway
    zero = new_logp.new_zeros(())
    if n == 0:
        stats = dict.fromkeys(("pg_loss", "entropy", "approx_kl", "clipfrac"), zero)
        return new_logp.masked_fill(~mask, 0.0).sum(), stats | {"valid_steps": zero}
    ent = entropy[mask] if entropy is not None else new_logp.new_zeros(n)
    flat = new_logp[mask]
    nothing = torch.zeros_like(flat)  # no critic: value inputs are zeros and vf_coef = 0
    loss, stats = ppo_loss(
        flat,
        old_logp[mask],
        advantages[mask],
        nothing,
        nothing,
        nothing,
        ent,
        clip_coef,
        clip_vloss=False,
        vf_coef=0.0,
        ent_coef=ent_coef,
    )
    del stats["v_loss"]
    return loss, stats | {"valid_steps": zero + n}
