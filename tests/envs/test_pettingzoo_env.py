"""PettingZoo's Parallel API as a VecEnv: every agent a row, an agent that leaves early, the
episode's end for all its agents, the one-hot agent index, the action mask of a Dict
observation, agent groups (their one-hot, padded observations, masked actions) and a policy per
group, refused spaces, per-agent returns in the records, and MPE2's simple_spread and
simple_speaker_listener."""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("pettingzoo")
from gymnasium import spaces  # noqa: E402
from pettingzoo import ParallelEnv  # noqa: E402

from distrl.config import PolicyConfig  # noqa: E402
from distrl.envs.pettingzoo_env import ParallelVecEnv, agent_group  # noqa: E402
from distrl.policy.actor_critic import ActorCritic  # noqa: E402


def one_group(agent: str) -> str:
    return "all"


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
    env = ParallelVecEnv(Relay, 2, "cpu", agent_id=True, groups=one_group)
    assert env.policy_groups == ("all",) and env.num_envs == 4 and env.obs_dim == 3 + 2
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
    env = ParallelVecEnv(lambda: Relay(masked=True), 1, "cpu", groups=one_group)
    assert env.action_space.mask_in_obs and env.obs_dim == 3 + 2
    obs = env.reset(seed=0)
    assert obs[:, -2:].tolist() == [[0.0, 1.0], [0.0, 1.0]]

    policy = ActorCritic(env.obs_dim, env.action_space, PolicyConfig(obs_normalization=False))
    for _ in range(10):
        assert (policy.act(obs)[0] == 1).all()  # action 0 is masked


class Mixed(Relay):
    """Relay whose agent ``b`` sees 4 entries and has 3 actions (``a``: 3 and 2)."""

    def observation_space(self, agent: str) -> Any:
        return spaces.Box(-10, 10, (3 if agent == "a" else 4,), np.float32)

    def action_space(self, agent: str) -> Any:
        return spaces.Discrete(2 if agent == "a" else 3)

    def _obs_of(self, agent: str) -> Any:
        o = super()._obs_of(agent)
        return o if agent == "a" else np.append(o, 7.0).astype(np.float32)


class Twins(Relay):
    """Relay with 2-D continuous actions."""

    def action_space(self, agent: str) -> Any:
        return spaces.Box(-1, 1, (2,), np.float32)


def test_agents_of_one_group_with_different_spaces_are_refused():
    with pytest.raises(ValueError, match="agents 'a' and 'b' of group 'all' have different"):
        ParallelVecEnv(Mixed, 1, "cpu", groups=one_group)

    class Continuous(Relay):
        def action_space(self, agent: str) -> Any:
            return spaces.Box(-1, 1, (1 if agent == "a" else 2,), np.float32)

    with pytest.raises(ValueError, match="continuous actions must be the same Box"):
        ParallelVecEnv(Continuous, 1, "cpu")


def test_agents_group_by_name_and_rows_start_with_their_group():
    assert [agent_group(a) for a in ("adversary_0", "agent_12", "speaker", "a_b")] == [
        "adversary", "agent", "speaker", "a_b"
    ]  # fmt: skip
    env = ParallelVecEnv(Mixed, 2, "cpu")  # a and b: two groups of different spaces
    assert env.policy_groups == ("a", "b") and env.obs_dim == 2 + 4 + 3
    assert env.action_space.n == 3 and env.action_space.mask_in_obs
    obs = env.reset(seed=0)
    # [group one-hot | observation padded to 4 | legal actions: a has 2 of the policy's 3]
    assert obs[0].tolist() == [1, 0, 0, 0, 1, 0, 1, 1, 0]
    assert obs[1].tolist() == [0, 1, 1, 0, 1, 7, 1, 1, 1]
    policy = ActorCritic.for_env(env, PolicyConfig())
    assert policy.normalizer.raw == 2  # the one-hot is not normalized
    for _ in range(10):  # a never draws its missing third action
        actions = policy.act(obs)[0]
        assert (actions[0::2] < 2).all()
        env.step(actions)


def test_a_policy_per_group_routes_each_row_to_its_groups_networks():
    env = ParallelVecEnv(Mixed, 3, "cpu")
    obs = env.reset(seed=0)
    torch.manual_seed(0)
    per_group = ActorCritic.for_env(env, PolicyConfig(mapping="per-group"))
    shared = ActorCritic.for_env(env, PolicyConfig())
    count = sum(p.numel() for p in shared.parameters())
    assert sum(p.numel() for p in per_group.parameters()) == 2 * count
    x = per_group.features(obs)
    for g in (0, 1):
        rows = x[g::2]
        # (to rounding: a matmul of 6 rows and one of 3 may sum in another order)
        torch.testing.assert_close(per_group.actor(x)[g::2], per_group.actor.nets[g](rows))
        torch.testing.assert_close(per_group.critic(x)[g::2], per_group.critic.nets[g](rows))
    # a loss on group a's rows alone moves only a's networks
    logp, _, value = per_group.evaluate(obs[0::2], torch.zeros(3, dtype=torch.int64))
    (logp.sum() + value.sum()).backward()
    for net in (per_group.actor, per_group.critic):
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in net.nets[0].parameters())
        assert all(p.grad is None or not p.grad.any() for p in net.nets[1].parameters())


def test_a_policy_per_group_of_continuous_agents_has_a_log_std_per_group():
    env = ParallelVecEnv(Twins, 2, "cpu")
    policy = ActorCritic.for_env(env, PolicyConfig(mapping="per-group"))
    assert policy.log_std.shape == (2, 2)
    with torch.no_grad():
        policy.log_std[1] = -5.0
    obs = env.reset(seed=0)
    actions = torch.zeros(4, 2)
    _, entropy, _ = policy.evaluate(obs, actions)
    assert entropy[0] == entropy[2] and entropy[1] == entropy[3] and entropy[1] < entropy[0]


@pytest.mark.parametrize(
    "policy, match",
    [
        (PolicyConfig(mapping="per-group"), "this task's agents form one group"),
        (PolicyConfig(mapping="per-group", recurrent="gru"), "an encoder or a recurrent core"),
        (PolicyConfig(mapping="per-group", head="tanh"), "sac's or td3's critics"),
    ],
)
def test_a_policy_per_group_is_refused_where_it_cannot_route(policy, match):
    if "one group" in match:
        env = ParallelVecEnv(Relay, 1, "cpu", groups=one_group)
    else:
        env = ParallelVecEnv(Twins, 1, "cpu")
    with pytest.raises(ValueError, match=match):
        ActorCritic.for_env(env, policy)


def test_a_registered_pettingzoo_task_trains_with_each_agents_return_in_the_records(tmp_path):
    import distrl
    from distrl.envs.registry import _USER

    distrl.register_task("relay", pettingzoo=lambda: Relay(leave=False), agent_id=True,
                         groups={"a": "relay", "b": "relay"}, replace=True)  # fmt: skip
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


def test_a_registered_task_trains_a_policy_per_group_and_exports_it(tmp_path):
    import distrl
    from distrl.envs.registry import _USER

    distrl.register_task("mixed", pettingzoo=Mixed, replace=True)
    try:
        result = distrl.train(
            "mixed", run_dir=str(tmp_path / "run"), env={"num_envs": 4},
            agent={"num_steps": 10, "max_iterations": 3}, policy={"mapping": "per-group"},
            threads=1, progress=False, tensorboard=False,
        )  # fmt: skip
        ckpt = sorted((tmp_path / "run" / "checkpoints").glob("*.pt"))[-1]
        policy = torch.load(ckpt, weights_only=True)["policy"]
        assert {"actor.nets.1.0.weight", "critic.nets.1.0.weight"} <= set(policy)
        out = distrl.export(str(tmp_path / "run"), "onnx", str(tmp_path / "policy.onnx"))
    finally:
        _USER.pop("mixed", None)
    assert set(result.metrics) >= {"agent/a/return", "agent/b/return"}
    assert out.max_abs_diff <= 1e-4


@pytest.mark.skipif(importlib.util.find_spec("mpe2") is None, reason="the multiagent extra")
def test_mpe_speaker_listener_has_two_groups_and_a_policy_for_each():
    from distrl.envs.registry import get_task

    task = get_task("mpe-speaker-listener")
    env = task.make_env(2, torch.device("cpu"))
    assert env.policy_groups == ("speaker", "listener") and env.action_space.n == 5
    assert task.default_config().policy.mapping == "per-group"
    obs = env.reset(seed=0)
    assert obs.shape == (4, 2 + 11 + 5) and obs[0, -2:].tolist() == [0.0, 0.0]  # 3 moves
