"""The learner role: advantages of a rollout, then the PPO update with the strategy combining
each minibatch's gradient."""

from __future__ import annotations

from typing import Any

import torch

from distrl.algorithms.ppo import PPO, GradientStep
from distrl.config import AgentConfig
from distrl.policy import ActorCritic
from distrl.storage.advantages import gae
from distrl.storage.rollout import RolloutBuffer, minibatch_indices


class Learner:
    def __init__(self, policy: ActorCritic, cfg: AgentConfig, num_envs: int, shuffle_seed: int):
        self.policy, self.cfg, self.num_envs = policy, cfg, num_envs
        self.ppo = PPO(policy, cfg)
        # Every rank shuffles its own batch with the same seed, so minibatch j of all ranks
        # together is one global minibatch (see minibatch_indices).
        self.shuffle_gen = torch.Generator().manual_seed(shuffle_seed)

    def shuffle(self) -> list[torch.Tensor]:
        """One epoch's minibatch indices into the flat [T*N] rollout."""
        a = self.cfg
        return minibatch_indices(a.num_steps, self.num_envs, a.num_minibatches, self.shuffle_gen)

    @torch.no_grad()
    def advantages(self, buf: RolloutBuffer, last_obs: torch.Tensor) -> None:
        """GAE(gamma, lambda) into ``buf.advantages`` and ``buf.returns``."""
        a = self.cfg
        buf.advantages, buf.returns = gae(
            buf.rewards,
            buf.values,
            buf.terminated,
            buf.truncated,
            buf.final_values,
            self.policy.value(last_obs),
            a.gamma,
            a.gae_lambda,
        )

    def update(
        self, buf: RolloutBuffer, global_sums: torch.Tensor, stepper: GradientStep
    ) -> dict[str, Any]:
        """The PPO update, with the batch statistics of every learner (``PPO.batch_sums``
        added up over ranks)."""
        return self.ppo.update(buf, PPO.batch_stats(global_sums), self.shuffle, stepper)

    def state_dict(self) -> dict[str, Any]:
        return {"ppo": self.ppo.state_dict(), "shuffle_rng": self.shuffle_gen.get_state()}

    def load_state_dict(self, s: dict[str, Any]) -> None:
        self.ppo.load_state_dict(s["ppo"])
        self.shuffle_gen.set_state(s["shuffle_rng"])
