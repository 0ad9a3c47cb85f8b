"""Behaviour cloning's loss: the negative log-likelihood of an expert's actions under the
policy's Gaussian. ``distrl pretrain`` minimizes it alone; RLOO fine-tuning with
``--multitask.demos`` adds it to every minibatch's loss (DAPG's demonstration-augmented policy
gradient, Rajeswaran et al. 2018, "Learning Complex Dexterous Manipulation with Deep
Reinforcement Learning and Demonstrations")."""

from __future__ import annotations

import torch

from distrl.policy import ActorCritic
from distrl.policy import distributions as D


def bc_loss(
    policy: ActorCritic, obs: torch.Tensor, actions: torch.Tensor, reduction: str = "mean"
) -> torch.Tensor:
    """Negative log-likelihood of ``actions`` [N, A] under the policy's Gaussian: the mean over
    the N steps, or their sum (``reduction="sum"``)."""
    mean = policy.actor(policy.normalizer(obs))
    logp, _ = D.gaussian_logprob_entropy(mean, policy.log_std.expand_as(mean), actions)
    return -(logp.sum() if reduction == "sum" else logp.mean())
