"""SAC (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications"): a squashed
Gaussian actor (``policy/heads.SquashedGaussian``, the policy's actor), twin critics with a
Polyak-averaged target (clipped double Q), and an entropy temperature learned towards an
entropy of minus the action dimension (``--offpolicy.alpha`` fixes it instead).

One minibatch gives all three losses from the same parameters and one backward (each loss
reaches only its own parameters: the actor's goes through critics that do not take gradients),
so a strategy combines them in one collective; Stable-Baselines3 and CleanRL step the critic
before computing the actor's loss with it, a difference of one update's lag.

    y          = r + gamma (1 - terminated) (min_i Q'_i(s', a') - alpha log pi(a'|s')),  a' ~ pi(s')
    loss_q     = sum_i mse(Q_i(s, a), y)
    loss_actor = mean(alpha log pi(a~|s) - min_i Q_i(s, a~)),                      a~ ~ pi(s)
    loss_alpha = -mean(log alpha (log pi(a~|s) + target_entropy))

With ``--offpolicy.n-step`` the rows are n-step transitions (``storage/nstep.py``): r is the
discounted sum of the n rewards and gamma their own gamma^m; the entropy bonus enters at the
bootstrap only, not at the steps in between.
"""

from __future__ import annotations

import torch
from torch import nn

from distrl.algorithms.off_policy import (
    OffPolicyLearner,
    TwinQ,
    bootstrap_discount,
    frozen_copy,
    polyak,
    twin_q_loss,
)
from distrl.config import TrainConfig
from distrl.policy.actor_critic import ActorCritic
from distrl.policy.heads import SquashedGaussian


class Temperature(nn.Module):
    def __init__(self, alpha: float):
        super().__init__()
        self.log_alpha = nn.Parameter(torch.tensor([alpha]).log())


def continuous_critic(policy: ActorCritic, cfg: TrainConfig) -> TwinQ:
    """Twin critics of the policy's features and unit actions, on its device."""
    p, A = cfg.policy, len(policy.action_space.low)
    device = policy.normalizer.count.device
    return TwinQ(policy.obs_dim, A, p.critic_hidden, p.activation).to(device)


class SAC(OffPolicyLearner):
    SCALARS = ("loss/q", "loss/actor", "loss/alpha", "q", "alpha", "entropy")

    def __init__(self, policy: ActorCritic, cfg: TrainConfig):
        o = cfg.offpolicy
        self.critic = continuous_critic(policy, cfg)
        self.target = frozen_copy(self.critic)
        device = policy.normalizer.count.device
        self.temperature = Temperature(1.0 if o.alpha is None else o.alpha).to(device)
        self.learn_alpha = o.alpha is None
        self.temperature.requires_grad_(self.learn_alpha)
        A = len(policy.action_space.low)
        self.target_entropy = -float(A) if o.target_entropy is None else o.target_entropy
        groups = {
            "actor": list(policy.actor.parameters()),
            "critic": list(self.critic.parameters()),
        }
        if self.learn_alpha:
            groups["alpha"] = list(self.temperature.parameters())
        modules = {"critic": self.critic, "target": self.target, "temperature": self.temperature}
        super().__init__(policy, cfg, modules, groups)
        head = policy.head
        assert isinstance(head, SquashedGaussian), "check_head: sac trains a squashed-gaussian"
        self.head, self.body = head, policy.actor_body

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(features, unit action, its log-probability) of the current actor."""
        x = self.policy.features(obs)
        unit, logp = self.head.sample(self.body(x))
        return x, unit, logp

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        gamma = bootstrap_discount(batch, self.cfg.agent.gamma)
        alpha = self.temperature.log_alpha.exp().detach()
        with torch.no_grad():
            x_next, a_next, logp_next = self.sample(batch["next_obs"])
            q1t, q2t = self.target(x_next, a_next)
            soft = torch.min(q1t, q2t) - alpha * logp_next
            y = batch["rewards"] + gamma * (~batch["terminated"]).float() * soft
        x = self.policy.features(batch["obs"])
        q1, q2 = self.critic(x, batch["actions"])
        loss_q = twin_q_loss(self, q1, q2, y, batch)
        _, a_pi, logp = self.sample(batch["obs"])
        self.critic.requires_grad_(False)  # the actor's loss does not train the critics
        q_pi = torch.min(*self.critic(x, a_pi))
        self.critic.requires_grad_(True)
        loss_actor = (alpha * logp - q_pi).mean()
        log_alpha = self.temperature.log_alpha
        loss_alpha = -(log_alpha * (logp.detach() + self.target_entropy)).mean()
        loss = loss_q + loss_actor + (loss_alpha if self.learn_alpha else 0.0)
        scalars = (loss_q, loss_actor, loss_alpha, q1.mean(), alpha[0], -logp.mean())
        return loss, scalars

    @torch.no_grad()
    def explore(
        self, obs: torch.Tensor, progress: float, uniform: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if uniform:
            unit = torch.rand(obs.shape[0], len(self.policy.action_space.low), device=obs.device)
            unit = unit * 2.0 - 1.0
        else:
            _, unit, _ = self.sample(obs)
        return self.head.to_env(unit), unit

    def move_targets(self) -> None:
        if self.updates % self.o.target_interval == 0:
            polyak(self.target, self.critic, self.o.tau)

    def metrics(self) -> dict[str, float]:
        return {"alpha": float(self.temperature.log_alpha.detach().exp())}
