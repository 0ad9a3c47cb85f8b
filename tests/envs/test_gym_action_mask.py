"""A Gymnasium env whose Dict observation carries an ``action_mask`` (SB3-contrib's MaskablePPO
convention): the mask goes last in the row, the policy never takes a masked action, and a mask
that does not fit the actions is refused naming both."""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
import pytest
from gymnasium import spaces

import distrl
from distrl.envs.gym import GymVecEnv
from distrl.envs.registry import _USER


class OnlyLegal(gymnasium.Env):
    """Three actions, of which the mask allows one, a different one each step; an illegal
    action raises (a policy that ignored the mask would end the run)."""

    def __init__(self, actions: int = 3) -> None:
        self.observation_space = spaces.Dict(
            {"action_mask": spaces.MultiBinary(3), "position": spaces.Box(-1, 1, (2,))}
        )
        self.action_space = spaces.Discrete(actions)
        self.t = 0

    def _obs(self) -> dict[str, Any]:
        mask = np.zeros(3, dtype=np.int8)
        mask[self.t % 3] = 1
        return {"action_mask": mask, "position": np.array([0.5, -0.5], dtype=np.float32)}

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: int) -> tuple[dict, float, bool, bool, dict]:
        if action != self.t % 3:
            raise ValueError(f"illegal action {action} at step {self.t}")
        self.t += 1
        return self._obs(), 1.0, False, self.t >= 10, {}


def test_the_mask_goes_last_and_the_policy_only_takes_legal_actions(tmp_path):
    same_step = gymnasium.vector.AutoresetMode.SAME_STEP
    env = GymVecEnv.wrap(gymnasium.vector.SyncVectorEnv([OnlyLegal] * 2, autoreset_mode=same_step))
    assert env.action_space.mask_in_obs and env.obs_dim == 5
    obs = env.reset(seed=0)
    assert obs[0].tolist() == [0.5, -0.5, 1.0, 0.0, 0.0]  # position, then the mask
    env.close()
    distrl.register_task("only-legal", gym=OnlyLegal, replace=True)
    try:
        result = distrl.train("only-legal", run_dir=str(tmp_path / "run"), env={"num_envs": 4},
                              agent={"num_steps": 16, "max_iterations": 3}, threads=1,
                              progress=False, tensorboard=False)  # fmt: skip
    finally:
        _USER.pop("only-legal", None)
    assert result.metrics["episode_return_mean"] == 10.0  # every step legal, to the time limit


def test_a_mask_that_does_not_fit_the_actions_is_refused():
    same_step = gymnasium.vector.AutoresetMode.SAME_STEP
    envs = gymnasium.vector.SyncVectorEnv([lambda: OnlyLegal(4)], autoreset_mode=same_step)
    with pytest.raises(ValueError, match="'action_mask' has 3 entries"):
        GymVecEnv.wrap(envs)
