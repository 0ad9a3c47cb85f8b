"""A non-finite final observation at a time limit (``info["final_obs"]``) is named, with the
rank, env and step, before the update runs: PPO sees it through V(final_obs), the off-policy
learners where it would enter the replay (or PQN's bootstrap)."""

from __future__ import annotations

import pytest
import torch

import distrl
from distrl.runner.collector import NonFiniteEnvError


class NaNAtTimeLimit(distrl.VecEnv):
    """Episodes of 5 steps ending in a time limit; env 1's final observation is NaN."""

    def __init__(self, num_envs, device, max_episode_steps=None):
        self.num_envs, self.obs_dim, self.device = num_envs, 3, torch.device(device)
        self.action_space = distrl.ActionSpace("discrete", n=2)
        self.max_episode_steps = 5
        self.t = torch.zeros(num_envs, dtype=torch.long, device=self.device)

    def reset(self, seed=None):
        self.t.zero_()
        return torch.zeros(self.num_envs, 3, device=self.device)

    def step(self, actions):
        self.t += 1
        trunc = self.t >= self.max_episode_steps
        obs = self.t.float().unsqueeze(1).repeat(1, 3) / 5
        final = obs.clone()
        final[1] = float("nan")
        self.t[trunc] = 0
        term = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        return obs, actions.float(), term, trunc, {"final_obs": final}


distrl.register_task("nan-at-time-limit", make_env=NaNAtTimeLimit)


@pytest.mark.parametrize("algorithm", ["ppo", "pqn", "dqn"])
def test_a_nan_final_observation_is_named(algorithm, tmp_path):
    extra: dict = {}
    if algorithm == "dqn":
        extra["offpolicy"] = {"learning_starts": 8, "batch_size": 4, "buffer_size": 64}
    with pytest.raises(NonFiniteEnvError) as err:
        distrl.train(
            "nan-at-time-limit",
            algorithm=algorithm,
            run_dir=str(tmp_path),
            env={"num_envs": 4},
            agent={"num_steps": 8, "max_iterations": 2},
            threads=1,
            progress=False,
            tensorboard=False,
            **extra,
        )
    msg = str(err.value)
    assert "rank 0: env 1" in msg and "final observation" in msg, msg
    assert "rollout step 4" in msg, msg  # the 5th step ends the first episodes
