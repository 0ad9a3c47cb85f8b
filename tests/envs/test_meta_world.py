"""Meta-World MT10 adapter: a clear error without the package; with it (the `metaworld` extra),
goal variants as init states, success terminating with reward 1, exact episode counts."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from distrl.envs.meta_world import MT10_TASKS, MetaWorldMT10, _metaworld
from distrl.storage.episodes import collect_episodes


def test_missing_package_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "metaworld", None)  # import metaworld -> ImportError
    with pytest.raises(ImportError, match=r"pip install -c constraints.txt -e '\.\[metaworld\]'"):
        _metaworld()
    with pytest.raises(ImportError, match="metaworld==3.1.1"):
        MetaWorldMT10("reach-v3", 1, benchmark_seed=987654)  # a seed not cached yet


def test_unknown_task() -> None:
    with pytest.raises(ValueError, match="unknown MT10 task"):
        MetaWorldMT10("reach-v2", 1)


@pytest.fixture(scope="module")
def metaworld():
    return pytest.importorskip("metaworld")


def expert(task: str):
    """Meta-World's scripted policy for ``task`` as a collector policy."""
    from metaworld.policies import ENV_POLICY_MAP

    scripted = ENV_POLICY_MAP[task]()

    def policy(obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        state = obs[:, :39].double().numpy()
        actions = np.stack([scripted.get_action(o) for o in state])
        return torch.from_numpy(actions).float(), torch.zeros(obs.shape[0])

    return policy


def test_mt10_names_match_the_package(metaworld) -> None:
    from metaworld.env_dict import MT10_V3

    assert tuple(MT10_V3) == MT10_TASKS


def test_goal_variants_are_the_init_states(metaworld) -> None:
    env = MetaWorldMT10("reach-v3", 3, max_episode_steps=50)
    assert env.num_init_states == 50
    assert env.obs_dim == 49 and env.action_space.dim == 4
    obs = env.reset_to(torch.tensor([4, 4, 9]))
    goal = obs[:, 36:39]  # the goal is the last 3 of the 39 state values
    assert torch.equal(goal[0], goal[1]) and not torch.equal(goal[0], goal[2])
    assert torch.equal(obs[:, 39:], torch.eye(10)[[0, 0, 0]])
    again = env.reset_rows(torch.tensor([False, False, True]), torch.tensor([0, 0, 4]))
    assert torch.equal(again[2, 36:39], goal[0]) and torch.equal(again[:2], obs[:2])
    env.close()


def test_expert_succeeds_and_success_ends_the_episode(metaworld) -> None:
    env = MetaWorldMT10("reach-v3", 3, max_episode_steps=150)
    batch = collect_episodes(env, expert("reach-v3"), [0, 17], group_size=2, seed=0)
    assert batch.num_episodes == 4
    assert batch.success.all(), batch.lengths
    assert (batch.lengths < 150).all()
    last = batch.rewards[torch.arange(4), batch.lengths - 1]
    assert torch.equal(last, torch.ones(4)) and torch.equal(batch.returns, torch.ones(4))
    # both episodes of a group start from the same goal variant
    assert torch.equal(batch.obs[0, 0, 36:39], batch.obs[1, 0, 36:39])
    env.close()


def test_random_policy_is_truncated(metaworld) -> None:
    env = MetaWorldMT10("push-v3", 2, max_episode_steps=20, reward="dense")
    gen = torch.Generator().manual_seed(0)

    def random_policy(obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.rand(obs.shape[0], 4, generator=gen) * 2 - 1, torch.zeros(obs.shape[0])

    batch = collect_episodes(env, random_policy, [1, 2, 3], group_size=1, seed=0)
    assert batch.lengths.tolist() == [20, 20, 20] and not batch.success.any()
    assert (batch.rewards[batch.mask] > 0).any()  # Meta-World's dense reward
    env.close()


def test_mixed_dense_batch_runs_meta_worlds_own_episodes(metaworld) -> None:
    """metaworld-mt10-ppo's env: row i runs task i mod 10 with its one-hot, the dense reward,
    and success does not end the episode (the scripted expert succeeds and keeps going)."""
    from distrl.envs.registry import get_task

    env = get_task("metaworld-mt10-ppo").make_env(12, torch.device("cpu"), 60)
    assert env.obs_dim == 49 and env.max_episode_steps == 60
    obs = env.reset(seed=0)
    want = torch.nn.functional.one_hot(torch.arange(12) % 10, 10).float()
    assert torch.equal(obs[:, 39:], want)
    scripted = [expert(t) for t in env.row_tasks]
    ever = torch.zeros(12, dtype=torch.bool)
    for step in range(60):
        acts = torch.cat([scripted[i](obs[i : i + 1])[0] for i in range(12)])
        obs, reward, terminated, truncated, info = env.step(acts)
        assert not terminated.any() and truncated.all() == (step == 59)
        ever |= info["success"]
        assert (reward >= 0).all() and torch.equal(obs[:, 39:], want)
    assert ever[0] and ever[10]  # reach-v3's expert succeeds within 60 steps, and goes on
    env.close()
