"""Policy networks: actor-critic MLPs, action samplers, observation normalizer."""

from distrl.policy.actor_critic import ActorCritic
from distrl.policy.normalizer import Moments, ReturnScale, RunningNorm

__all__ = ["ActorCritic", "Moments", "ReturnScale", "RunningNorm"]
