"""collect_episodes: exactly E episodes, grouped by init state, for any number of env rows."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from distrl.envs.core import ActionSpace
from distrl.envs.episodic import EpisodicVecEnv
from distrl.envs.reach import Reach, load_init_states
from distrl.storage.episodes import collect_episodes

T = 4


def episode_length(init_index: torch.Tensor) -> torch.Tensor:
    """Length of an episode from init state i: 1 + i % 5 steps, truncated at T = 4."""
    return (1 + init_index % 5).clamp_max(T)


class CountingEnv(EpisodicVecEnv):
    """Rows hold (init index, step); obs = [init index, step]. An episode from init state i
    terminates after 1 + i % 5 steps (success), or is truncated at T. Auto-resets draw a random
    init state (which the collector must override). Counts the episodes it is asked to start."""

    obs_dim = 2
    action_space = ActionSpace("discrete", n=2)
    num_init_states = 20

    def __init__(self, num_envs: int) -> None:
        self.num_envs, self.device, self.max_episode_steps = num_envs, torch.device("cpu"), T
        self.generator = torch.Generator().manual_seed(0)
        self.init = torch.zeros(num_envs, dtype=torch.long)
        self.t = torch.zeros(num_envs, dtype=torch.long)
        self.started = 0
        self.step_calls = 0

    def _obs(self) -> torch.Tensor:
        return torch.stack((self.init, self.t), 1).float()

    def reset(self, seed: int | None = None) -> torch.Tensor:
        self.init = torch.randint(20, (self.num_envs,), generator=self.generator)
        self.t.zero_()
        return self._obs()

    def reset_rows(self, mask: torch.Tensor, init_indices: torch.Tensor) -> torch.Tensor:
        self.started += int(mask.sum())
        self.init = torch.where(mask, init_indices, self.init)
        self.t = torch.where(mask, 0, self.t)
        return self._obs()

    def step(self, actions: torch.Tensor) -> tuple[Any, ...]:
        self.step_calls += 1
        self.t = self.t + 1
        terminated = self.t >= 1 + self.init % 5
        truncated = self.t >= T
        reward = 0.5 + terminated.float()
        done = terminated | truncated
        final = self._obs()
        self.init = torch.where(done, torch.randint(20, (self.num_envs,)), self.init)
        self.t = torch.where(done, 0, self.t)
        return self._obs(), reward, terminated, truncated, {"final_obs": final}


def echo_policy(obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """actions = step index, logp = init index: the buffer must put them back in place."""
    return obs[:, 1].long(), obs[:, 0]


@pytest.mark.parametrize(
    ("num_envs", "groups", "k"),
    [
        (1, 1, 1),  # one env, one episode
        (1, 3, 2),  # one env runs 6 episodes back to back
        (2, 2, 2),  # RIPT's setting: 2 envs, data_batch_size 4
        (3, 2, 2),  # N does not divide E = 4
        (4, 1, 4),  # N == E
        (8, 2, 2),  # N > E: 4 rows idle from the start
        (16, 2, 3),  # N > E and E = 6 not a divisor of N
        (5, 4, 3),  # E = 12, N = 5
        (7, 3, 3),  # E = 9, N = 7
    ],
)
def test_exactly_e_episodes_in_groups(num_envs: int, groups: int, k: int) -> None:
    env = CountingEnv(num_envs)
    init = [3, 11, 4, 7][:groups]
    batch = collect_episodes(env, echo_policy, init, group_size=k, seed=0)
    E = groups * k
    assert env.started == E  # no episode beyond E is ever started
    assert batch.num_episodes == E and batch.max_steps == T
    assert batch.obs.shape == (E, T, 2) and batch.actions.shape == (E, T)
    expected_init = torch.tensor(init).repeat_interleave(k)
    assert torch.equal(batch.init_indices, expected_init)
    assert torch.equal(batch.groups, torch.arange(E) // k)
    lengths = episode_length(expected_init)
    assert torch.equal(batch.lengths, lengths)  # every episode whole, none cut short
    assert torch.equal(batch.success, 1 + expected_init % 5 <= T)
    # each step landed where it belongs; padding stays zero
    steps = torch.arange(T).expand(E, T)
    mask = batch.mask
    assert torch.equal(mask, steps < lengths[:, None])
    assert torch.equal(batch.actions, torch.where(mask, steps, 0))
    assert torch.equal(batch.logprobs, torch.where(mask, expected_init[:, None].float(), 0.0))
    assert torch.equal(batch.obs[..., 0], batch.logprobs)
    torch.testing.assert_close(batch.returns, 0.5 * lengths + batch.success.float())
    assert batch.env_steps == env.step_calls * num_envs


@pytest.mark.parametrize(("num_envs", "groups", "k"), [(1, 2, 2), (3, 2, 2), (8, 2, 2)])
def test_noise_reaches_each_episode_step_by_step(num_envs: int, groups: int, k: int) -> None:
    # noise[e, t] = 100 e + t: the policy must see episode e's draw for its step t, whichever
    # row runs it, and an idle row zeros
    E = groups * k
    noise = (100 * torch.arange(E)[:, None] + torch.arange(T)).float()[..., None]
    seen: list[torch.Tensor] = []

    def noisy(obs: torch.Tensor, eps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        seen.append(eps)
        return eps[:, 0].long(), obs[:, 0]

    env = CountingEnv(num_envs)
    batch = collect_episodes(env, noisy, [3, 11][:groups], group_size=k, seed=0, noise=noise)
    assert all(e.shape == (num_envs, 1) for e in seen)
    assert torch.equal(batch.actions, torch.where(batch.mask, noise[..., 0].long(), 0))
    if num_envs > E:  # rows E.. never start an episode
        assert all(bool((e[E:] == 0).all()) for e in seen)
    with pytest.raises(ValueError, match=r"noise must be \[4, 4, \.\.\.\]"):
        collect_episodes(CountingEnv(2), noisy, [3, 11], group_size=2, noise=noise[:, :2])


def test_rows_stop_as_soon_as_the_last_episode_ends() -> None:
    # 2 rows, lengths [4, 4, 1, 1, 1, 1] (init 3 -> 4 steps, init 0 -> 1 step): row 0 runs
    # episode 0 (steps 1-4), row 1 episode 1 (steps 1-4); then episodes 2..5 take one step each,
    # two at a time: 4 + 2 = 6 steps, never a seventh.
    env = CountingEnv(2)
    batch = collect_episodes(env, echo_policy, [3, 0, 0], group_size=2)
    assert batch.lengths.tolist() == [4, 4, 1, 1, 1, 1]
    assert env.step_calls == 6


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        collect_episodes(CountingEnv(2), echo_policy, [], group_size=2)
    with pytest.raises(ValueError, match="group_size"):
        collect_episodes(CountingEnv(2), echo_policy, [1], group_size=0)


class NeverEnding(CountingEnv):
    def step(self, actions: torch.Tensor) -> tuple[Any, ...]:
        obs, reward, _, _, info = super().step(actions)
        never = torch.zeros(self.num_envs, dtype=torch.bool)
        return obs, reward, never, never, info


def test_an_env_that_ignores_its_time_limit_fails_loudly() -> None:
    with pytest.raises(RuntimeError, match="max_episode_steps"):
        collect_episodes(NeverEnding(2), echo_policy, [1], group_size=2)


def test_reach_random_policy_groups_share_their_start() -> None:
    env = Reach(3, task="reach-southeast-post")
    gen = torch.Generator().manual_seed(0)

    def random_policy(obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.rand(obs.shape[0], 2, generator=gen) * 2 - 1, torch.zeros(obs.shape[0])

    init = [5, 49, 0]
    batch = collect_episodes(env, random_policy, init, group_size=4, seed=1)
    table = torch.tensor(load_init_states("reach-southeast-post"))
    assert torch.equal(batch.obs[:, 0, :4], table[torch.tensor(init).repeat_interleave(4)])
    assert bool((batch.lengths >= 1).all() and (batch.lengths <= env.max_episode_steps).all())
    last = batch.rewards[torch.arange(12), batch.lengths - 1]
    assert torch.equal(last, batch.success.float())  # reward 1 exactly on the success step
    assert torch.equal(batch.returns, batch.success.float())  # no shaping: return = success
