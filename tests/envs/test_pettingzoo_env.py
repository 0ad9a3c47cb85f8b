"""PettingZoo's Parallel API as a VecEnv: every agent a row, an agent that leaves early, the
episode's end for all its agents, the one-hot agent index, the action mask of a Dict
observation, refused spaces, per-agent returns in the records, and MPE2's simple_spread."""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("pettingzoo")
from gymnasium import spaces  # noqa: E402
from pettingzoo import ParallelEnv  # noqa: E402

from distrl.envs.pettingzoo_env import ParallelVecEnv  # noqa: E402


class Relay(ParallelEnv):
    """Two agents; each step's reward is the agent's action; ``b`` leaves after 3 steps, the
    episode ends after 5 (``a`` terminates). Observations: [agent index, step, 1]."""

    metadata = {"name": "relay_v0"}

    def __init__(self, masked: bool = False, leave: bool = True) -> None:
        self.possible_agents = ["a", "b"]
        self.masked, self.leave = masked, leave
        box = spaces.Box(-10, 10, (3,), np.float32)
        self._obs = (
            spaces.Dict({"observation": box, "action_mask": spaces.MultiBinary(2)})
            if masked else box
        )  # fmt: skip

    def observation_space(self, agent: str) -> Any:
        return self._obs

    def action_space(self, agent: str) -> Any:
        return spaces.Discrete(2)

    def _obs_of(self, agent: str) -> Any:
        o = np.array([self.possible_agents.index(agent), self.t, 1.0], dtype=np.float32)
        if self.masked:
            return {"observation": o, "action_mask": np.array([0, 1], dtype=np.int8)}
        return o

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[dict, dict]:
        self.agents = list(self.possible_agents)
        self.t = 0
        return {a: self._obs_of(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict) -> tuple[dict, dict, dict, dict, dict]:
        self.t += 1
        rewards = {a: float(actions[a]) for a in self.agents}
        term = {a: self.t >= 5 or (a == "b" and self.leave and self.t >= 3) for a in self.agents}
        trunc = {a: False for a in self.agents}
        obs = {a: self._obs_of(a) for a in self.agents}
        self.agents = [a for a in self.agents if not term[a]]
        return obs, rewards, term, trunc, {a: {} for a in term}


def test_every_agent_is_a_row_and_an_episode_ends_for_all_its_agents():
    env = ParallelVecEnv(Relay, 2, "cpu", agent_id=True)
    assert env.num_envs == 4 and env.obs_dim == 3 + 2
    obs = env.reset(seed=0)
    assert obs[:, 0].tolist() == [0, 1, 0, 1] and obs[:, 3:].tolist() == [[1, 0], [0, 1]] * 2
    ones = torch.ones(4, dtype=torch.int64)
    for t in range(1, 6):
        obs, reward, terminated, truncated, info = env.step(ones)
        if t <= 3:
            assert reward.tolist() == [1.0] * 4
        else:  # b left after step 3: no reward, and a zero row until the copy resets
            assert reward.tolist() == [1.0, 0.0, 1.0, 0.0]
        if t == 4:
            assert obs[1].abs().sum() == 0 and obs[0, 1].item() == 4.0
        if t < 5:
            assert not (terminated | truncated).any()
    assert terminated.tolist() == [True, False, True, False]  # a terminated; b had left before
    assert truncated.tolist() == [False, True, False, True]
    assert info["final_obs"][0, 1].item() == 5.0 and obs[0, 1].item() == 0.0  # reset in the step
    assert env.agent_returns() == {"a": 5.0, "b": 3.0}


def test_a_dict_with_an_action_mask_masks_the_policy():
    env = ParallelVecEnv(lambda: Relay(masked=True), 1, "cpu")
    assert env.action_space.mask_in_obs and env.obs_dim == 3 + 2
    obs = env.reset(seed=0)
    assert obs[:, -2:].tolist() == [[0.0, 1.0], [0.0, 1.0]]
    from distrl.config import PolicyConfig
    from distrl.policy.actor_critic import ActorCritic

    policy = ActorCritic(env.obs_dim, env.action_space, PolicyConfig(obs_normalization=False))
    for _ in range(10):
        assert (policy.act(obs)[0] == 1).all()  # action 0 is masked


def test_agents_with_different_spaces_are_refused():
    class Mixed(Relay):
        def action_space(self, agent: str) -> Any:
            return spaces.Discrete(2 if agent == "a" else 3)

    with pytest.raises(ValueError, match="different observation or action spaces"):
        ParallelVecEnv(Mixed, 1, "cpu")


def test_a_registered_pettingzoo_task_trains_with_each_agents_return_in_the_records(tmp_path):
    import distrl
    from distrl.envs.registry import _USER

    distrl.register_task("relay", pettingzoo=lambda: Relay(leave=False), agent_id=True,
                         replace=True)  # fmt: skip
    try:
        result = distrl.train(
            "relay", run_dir=str(tmp_path / "run"), env={"num_envs": 4},
            agent={"num_steps": 10, "max_iterations": 3}, threads=1, progress=False,
            tensorboard=False,
        )  # fmt: skip
    finally:
        _USER.pop("relay", None)
    assert result.metrics["agent/a/return"] == pytest.approx(result.metrics["agent/b/return"],
                                                             abs=5)  # fmt: skip
    assert 0.0 <= result.metrics["agent/a/return"] <= 5.0


@pytest.mark.skipif(importlib.util.find_spec("mpe2") is None, reason="the multiagent extra")
def test_mpe_spread_steps_three_agents_per_copy():
    from distrl.envs.registry import get_task

    env = get_task("mpe-spread").make_env(2, torch.device("cpu"))
    obs = env.reset(seed=0)
    assert obs.shape == (6, 18) and env.action_space.n == 5
    for _ in range(25):
        obs, reward, terminated, truncated, _ = env.step(torch.randint(0, 5, (6,)))
    assert truncated.all() and not terminated.any()  # MPE's 25 cycles end by truncation
