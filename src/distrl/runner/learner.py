"""The learner role: advantages of a rollout, then the PPO update with the strategy combining
each minibatch's gradient."""

from __future__ import annotations

import warnings
from typing import Any

import torch

from distrl.algorithms.ppo import PPO, GradientStep
from distrl.config import AgentConfig
from distrl.policy import ActorCritic
from distrl.storage.advantages import gae, vtrace
from distrl.storage.rollout import RolloutBuffer, minibatch_indices, sequence_minibatches


class Learner:
    def __init__(
        self,
        policy: ActorCritic,
        cfg: AgentConfig,
        num_envs: int,
        shuffle_seed: int,
        off_policy: bool = False,
    ):
        self.policy, self.cfg, self.num_envs = policy, cfg, num_envs
        self.num_steps = cfg.num_steps  # the rollout's (fewer where it was preempted)
        self.off_policy = off_policy
        """V-trace instead of GAE: the rollouts may come from older weights (async actors)."""
        self.ppo = PPO(policy, cfg)
        # Every rank shuffles its own batch with the same seed, so minibatch j of all ranks
        # together is one global minibatch (see minibatch_indices). The generator lives on the
        # policy's device, so a GPU shuffles its batch itself.
        device = next(policy.parameters()).device
        self.shuffle_gen = torch.Generator(device=device).manual_seed(shuffle_seed)

    def shuffle(self) -> list[torch.Tensor]:
        """One epoch's minibatch indices into the flat [T*N] rollout."""
        a = self.cfg
        sample = sequence_minibatches if self.policy.recurrent else minibatch_indices
        return sample(self.num_steps, self.num_envs, a.num_minibatches, self.shuffle_gen)

    @torch.no_grad()
    def advantages(
        self, buf: RolloutBuffer, last_obs: torch.Tensor, last_memory: torch.Tensor
    ) -> None:
        """GAE(gamma, lambda) into ``buf.advantages`` and ``buf.returns``; with ``off_policy``
        V-trace (``vtrace``) under the current policy and critic instead. ``last_memory``: a
        recurrent policy's memory for ``last_obs`` (the bootstrap value's)."""
        a = self.cfg
        memory = last_memory if self.policy.recurrent else None
        if self.off_policy:
            self._vtrace(buf, last_obs, memory)
            return
        buf.advantages, buf.returns = gae(
            buf.rewards,
            buf.values,
            buf.terminated,
            buf.truncated,
            buf.final_values,
            self.policy.value(last_obs, memory),
            a.gamma,
            a.gae_lambda,
        )

    def _vtrace(
        self, buf: RolloutBuffer, last_obs: torch.Tensor, memory: torch.Tensor | None
    ) -> None:
        """V-trace targets and advantages for a rollout an actor collected with older weights:
        the current policy's log-probs and the current critic's values over the whole batch.
        ``buf.values`` become the current critic's (the value clip then centres on them); the
        truncated steps' V(final_obs) stay the actor's (final observations are not shipped)."""
        a = self.cfg
        T, N = buf.rewards.shape
        logp, _, values = self.policy.evaluate(  # time-major rows: the sequences of every env
            buf.obs.reshape(T * N, -1),
            buf.actions.reshape(T * N, *buf.actions.shape[2:]),
            buf.memory if memory is not None else None,
            buf.starts.reshape(T * N),
        )
        buf.values = values.reshape(T, N)
        buf.advantages, buf.returns = vtrace(
            buf.rewards,
            buf.values,
            buf.terminated,
            buf.truncated,
            buf.final_values,
            self.policy.value(last_obs, memory),
            logp.reshape(T, N) - buf.logprobs,
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
        restore_generator(self.shuffle_gen, s["shuffle_rng"], "minibatch shuffle")


def restore_generator(gen: torch.Generator, state: torch.Tensor, what: str) -> None:
    """``gen.set_state(state)``; a state saved by another device's generator (a run saved on a
    GPU resumed on a CPU, or the reverse: their states differ in kind and size) leaves ``gen``
    at its seed, with a warning that the run goes on without matching the uninterrupted one."""
    try:
        gen.set_state(state)
    except RuntimeError:
        warnings.warn(
            f"resume: the {what} state was saved on another device than this run's "
            f"{gen.device}; it restarts from the seed, so this run will not match the "
            f"uninterrupted one bit for bit",
            stacklevel=2,
        )
