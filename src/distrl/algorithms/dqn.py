"""DQN (Mnih et al. 2015) with double Q-learning (van Hasselt et al. 2016): a target network
moved every ``--offpolicy.target-interval`` updates by ``--offpolicy.tau`` (1.0: copied, as
CleanRL's ``dqn.py``), the Huber loss of Stable-Baselines3, epsilon-greedy exploration falling
linearly over ``--offpolicy.eps-fraction`` of the run.

The Q-network is the policy's actor: its outputs are the Q-values, so the deterministic policy
every tool deploys (evaluation, ``play``, ``export``) is the greedy one. The policy's value head
is not trained.

    y = r + gamma (1 - terminated) Q_target(s', argmax_a Q(s', a))
    loss = huber(Q(s, a), y)

With ``--offpolicy.n-step`` the rows are n-step transitions (``storage/nstep.py``): r is their
discounted sum and gamma their own gamma^m. With ``--offpolicy.prioritized`` each row's Huber
loss is weighted by its importance-sampling weight, and |Q(s, a) - y| becomes its priority
(``storage/replay.PrioritizedReplayBuffer``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from distrl.algorithms.off_policy import (
    OffPolicyLearner,
    bootstrap_discount,
    epsilon,
    epsilon_greedy,
    frozen_copy,
    polyak,
)
from distrl.config import TrainConfig
from distrl.policy.actor_critic import ActorCritic


def q_values(policy: ActorCritic, obs: torch.Tensor) -> torch.Tensor:
    """Q(s, .) [N, A] of raw observations: the actor's outputs."""
    return policy.actor(policy.features(obs))


def double_q_target(
    online: ActorCritic,
    target: ActorCritic,
    rewards: torch.Tensor,
    next_obs: torch.Tensor,
    terminated: torch.Tensor,
    gamma: torch.Tensor | float,
) -> torch.Tensor:
    """r + gamma (1 - terminated) Q_target(s', argmax_a Q_online(s', a)), [N]; ``gamma``: one
    discount, or each row's [N]."""
    with torch.no_grad():
        best = q_values(online, next_obs).argmax(-1, keepdim=True)
        nxt = q_values(target, next_obs).gather(-1, best).squeeze(-1)
        return rewards + gamma * (~terminated).float() * nxt


class QLearner(OffPolicyLearner):
    """A learner whose policy's actor is its Q-network, exploring epsilon-greedily."""

    SCALARS = ("loss/q", "q")

    def __init__(self, policy: ActorCritic, cfg: TrainConfig, modules: dict[str, nn.Module]):
        trained = [p for p in policy.parameters() if p.requires_grad]
        super().__init__(policy, cfg, modules, {"q": trained})
        self.eps = cfg.offpolicy.eps_start
        self.fixed_eps: float | None = None
        """An Ape-X actor's own epsilon (--offpolicy.actor-epsilon), in place of the
        schedule."""

    @torch.no_grad()
    def explore(
        self, obs: torch.Tensor, progress: float, uniform: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        scheduled = epsilon(self.cfg, progress) if self.fixed_eps is None else self.fixed_eps
        self.eps = 1.0 if uniform else scheduled
        actions = epsilon_greedy(q_values(self.policy, obs), self.eps)
        return actions, actions

    def metrics(self) -> dict[str, float]:
        return {"epsilon": self.eps}


class DQN(QLearner):
    def __init__(self, policy: ActorCritic, cfg: TrainConfig):
        self.target = frozen_copy(policy)
        super().__init__(policy, cfg, {"target": self.target})

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        y = double_q_target(
            self.policy,
            self.target,
            batch["rewards"],
            batch["next_obs"],
            batch["terminated"],
            bootstrap_discount(batch, self.cfg.agent.gamma),
        )
        q = q_values(self.policy, batch["obs"]).gather(-1, batch["actions"].unsqueeze(-1))
        q = q.squeeze(-1)
        if "weights" in batch:  # a prioritized replay's rows
            self.td_abs = (q - y).detach().abs()
            loss = (batch["weights"] * F.smooth_l1_loss(q, y, reduction="none")).mean()
        else:
            loss = F.smooth_l1_loss(q, y)
        return loss, (loss, q.mean())

    def move_targets(self) -> None:
        if self.updates % self.o.target_interval == 0:
            polyak(self.target, self.policy, self.o.tau)
