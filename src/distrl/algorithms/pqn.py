"""PQN (Gallici et al. 2025, "Simplifying Deep Temporal Difference Learning", ICLR): Q-learning
over rollouts of many parallel envs, without a replay buffer or a target network; LayerNorm in
the Q-network keeps it stable (``--policy.layer-norm``). Each iteration's rollout gets
Q(lambda) returns under the current network, then ``--agent.num-epochs`` passes of
``--agent.num-minibatches`` minibatches regress Q(s, a) on them, each step through the strategy
as PPO's are (CleanRL's ``pqn.py`` is the reference: its defaults are these).

The Q-network is the policy's actor, as for DQN (``dqn.py``); the value head is not trained.
"""

from __future__ import annotations

import torch

from distrl.algorithms.dqn import QLearner, q_values
from distrl.config import TrainConfig
from distrl.policy.actor_critic import ActorCritic


def q_lambda_returns(
    rewards: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    next_q: torch.Tensor,
    final_q: torch.Tensor,
    gamma: float,
    lam: float,
) -> torch.Tensor:
    """Peng's Q(lambda) returns [T, N] of a rollout, backwards:

        G_t = r_t + gamma ((1 - lam) max_a Q(s_{t+1}, a) + lam G_{t+1})

    with G_{T} replaced by max_a Q(s_T, a) at the rollout's end; at a termination G_t = r_t;
    at a time limit G_t = r_t + gamma max_a Q(final_obs, a) (``final_q``, valid where
    ``truncated``); ``next_q`` [T, N]: max_a Q(s_{t+1}, a), the next row's observation (the
    observation after the rollout for the last)."""
    T = rewards.shape[0]
    returns = torch.empty_like(rewards)
    nxt = next_q[T - 1]
    for t in reversed(range(T)):
        mix = next_q[t] if t == T - 1 else (1.0 - lam) * next_q[t] + lam * nxt
        boot = torch.where(truncated[t], final_q[t], mix)
        returns[t] = rewards[t] + gamma * (~terminated[t]).float() * boot
        nxt = returns[t]
    return returns


class PQN(QLearner):
    replay = False

    def __init__(self, policy: ActorCritic, cfg: TrainConfig):
        super().__init__(policy, cfg, {})

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        q = q_values(self.policy, batch["obs"]).gather(-1, batch["actions"].unsqueeze(-1))
        q = q.squeeze(-1)
        loss = 0.5 * (q - batch["returns"]).pow(2).mean()
        return loss, (loss, q.mean())

    @torch.no_grad()
    def max_q(self, obs: torch.Tensor) -> torch.Tensor:
        """max_a Q(s, a) [N]."""
        return q_values(self.policy, obs).max(-1).values
