"""TD3 (Fujimoto et al. 2018, "Addressing Function Approximation Error in Actor-Critic
Methods"): a deterministic tanh actor (``policy/heads.Tanh``, the policy's actor), twin
critics, target policy smoothing, and the actor and both targets updated every
``--offpolicy.policy-delay`` critic updates. Gaussian exploration noise of
``--offpolicy.exploration-noise`` half-ranges while collecting.

    a' = clip(pi'(s') + clip(N(0, policy_noise), -noise_clip, noise_clip), -1, 1)
    y  = r + gamma (1 - terminated) min_i Q'_i(s', a')
    loss_q = sum_i mse(Q_i(s, a), y);   every policy_delay: loss_actor = -mean(Q_1(s, pi(s)))

With ``--offpolicy.n-step`` the rows are n-step transitions (``storage/nstep.py``): r is the
discounted sum of the n rewards and gamma their own gamma^m.
"""

from __future__ import annotations

import torch

from distrl.algorithms.off_policy import (
    OffPolicyLearner,
    bootstrap_discount,
    frozen_copy,
    polyak,
    twin_q_loss,
)
from distrl.algorithms.sac import continuous_critic
from distrl.config import TrainConfig
from distrl.policy.actor_critic import ActorCritic
from distrl.policy.heads import Tanh


class TD3(OffPolicyLearner):
    SCALARS = ("loss/q", "loss/actor", "q")

    def __init__(self, policy: ActorCritic, cfg: TrainConfig):
        self.critic = continuous_critic(policy, cfg)
        self.target = frozen_copy(self.critic)
        self.target_policy = frozen_copy(policy)
        groups = {
            "critic": list(self.critic.parameters()),
            "actor": list(policy.actor.parameters()),
        }
        modules = {
            "critic": self.critic,
            "target": self.target,
            "target_policy": self.target_policy,
        }
        super().__init__(policy, cfg, modules, groups)
        head = policy.head
        assert isinstance(head, Tanh), "check_head: td3 trains a tanh head"
        self.head = head

    @staticmethod
    def unit(policy: ActorCritic, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(policy.actor_body(x))

    def actor_due(self) -> bool:
        return self.updates % self.o.policy_delay == 0

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        o, gamma = self.o, bootstrap_discount(batch, self.cfg.agent.gamma)
        with torch.no_grad():
            x_next = self.target_policy.features(batch["next_obs"])
            a = self.unit(self.target_policy, x_next)
            noise = (torch.randn_like(a) * o.policy_noise).clamp(-o.noise_clip, o.noise_clip)
            q1t, q2t = self.target(x_next, (a + noise).clamp(-1.0, 1.0))
            y = batch["rewards"] + gamma * (~batch["terminated"]).float() * torch.min(q1t, q2t)
        x = self.policy.features(batch["obs"])
        q1, q2 = self.critic(x, batch["actions"])
        loss_q = twin_q_loss(self, q1, q2, y, batch)
        loss_actor = torch.zeros((), device=q1.device)
        if self.actor_due():
            self.critic.requires_grad_(False)
            loss_actor = -self.critic(x, self.unit(self.policy, x))[0].mean()
            self.critic.requires_grad_(True)
        return loss_q + loss_actor, (loss_q, loss_actor, q1.mean())

    @torch.no_grad()
    def explore(
        self, obs: torch.Tensor, progress: float, uniform: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        A = len(self.policy.action_space.low)
        if uniform:
            unit = torch.rand(obs.shape[0], A, device=obs.device) * 2.0 - 1.0
        else:
            unit = self.unit(self.policy, self.policy.features(obs))
            unit = (unit + torch.randn_like(unit) * self.o.exploration_noise).clamp(-1.0, 1.0)
        return self.head.to_env(unit), unit

    def due(self, group: str) -> bool:
        return group == "critic" or self.actor_due()

    def move_targets(self) -> None:
        # ``updates`` already counts this step: the actor stepped when it was due before it
        if (self.updates - 1) % self.o.policy_delay == 0:
            polyak(self.target, self.critic, self.o.tau)
            polyak(self.target_policy, self.policy, self.o.tau)
