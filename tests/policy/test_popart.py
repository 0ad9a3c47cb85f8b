"""PopArt: per-task value statistics that move without changing any value, a value loss in
each task's normalized units, and the refusals that name the fix."""

from __future__ import annotations

import pytest
import torch

from distrl.config import AgentConfig, PolicyConfig
from distrl.envs.core import ActionSpace
from distrl.policy import ActorCritic
from distrl.policy.normalizer import PopArt

K, D = 3, 7
SPACE = ActionSpace("continuous", low=(-1.0,) * 2, high=(1.0,) * 2)


def tagged_obs(n: int, gen: torch.Generator) -> torch.Tensor:
    """[n, D]: random state, then a one-hot task id (row i: task i mod K)."""
    obs = torch.randn(n, D, generator=gen)
    obs[:, -K:] = torch.nn.functional.one_hot(torch.arange(n) % K, K).float()
    return obs


def policy() -> ActorCritic:
    torch.manual_seed(0)
    return ActorCritic(D, SPACE, PolicyConfig(popart_tasks=K, critic_hidden=(16,)))


def test_statistics_move_and_every_value_stays_the_same():
    p, gen = policy(), torch.Generator().manual_seed(1)
    obs = tagged_obs(60, gen)
    scales = torch.tensor([1.0, 100.0, -5.0])
    for step in range(3):
        before = p.value(obs)
        targets = torch.randn(60, generator=gen) * scales[torch.arange(60) % K] + 10.0 * step
        p.popart.update(p.popart.moments(targets, obs), p.value_head())
        torch.testing.assert_close(p.value(obs), before, atol=1e-4, rtol=1e-5)
        if step == 0:  # the first batch of a task sets its statistics
            for k in range(K):
                t = targets[k::K].double()
                assert float(p.popart.mu[k]) == pytest.approx(float(t.mean()), rel=1e-6)
                want = float(t.std(unbiased=False))
                assert float(p.popart.sigma[k]) == pytest.approx(want, rel=1e-5)
    assert p.popart.sigma[1] > 5 * p.popart.sigma[0]  # (the moving mean widens both)


def test_later_batches_move_the_statistics_by_beta_and_absent_tasks_keep_theirs():
    pop = PopArt(2, beta=0.1)
    head = torch.nn.Linear(4, 2)
    obs = torch.zeros(4, 5)
    obs[:, -2:] = torch.tensor([[1.0, 0.0]] * 4)  # task 0 only
    pop.update(pop.moments(torch.full((4,), 2.0), obs), head)
    pop.update(pop.moments(torch.full((4,), 12.0), obs), head)
    assert float(pop.mu[0]) == pytest.approx(0.9 * 2.0 + 0.1 * 12.0)
    # E[x^2] moves the same way: 0.9 * 4 + 0.1 * 144 = 18; var = 18 - 3^2 = 9
    assert float(pop.sigma[0]) == pytest.approx(3.0)
    assert float(pop.mu[1]) == 0.0 and float(pop.sigma[1]) == 1.0 and not pop.seen[1]


def test_value_loss_is_taken_in_each_tasks_normalized_units():
    from distrl.algorithms.ppo import PPO
    from distrl.storage.rollout import Batch

    p, gen = policy(), torch.Generator().manual_seed(3)
    obs = tagged_obs(30, gen)
    targets = torch.randn(30, generator=gen) * torch.tensor([1.0, 1e3, 1e6])[torch.arange(30) % K]
    p.popart.update(p.popart.moments(targets, obs), p.value_head())
    ppo = PPO(p, AgentConfig(clip_vloss=False, vf_coef=1.0, ent_coef=0.0))
    with torch.no_grad():
        actions, logp, values = p.act(obs)
    mb = Batch(
        obs=obs,
        actions=actions,
        logprobs=logp,
        advantages=torch.zeros(30),
        returns=targets,
        values=values,
        starts=torch.zeros(30, dtype=torch.bool),
    )
    flat = ppo.gradient(mb)
    v_loss = float(flat[ppo.num_grad + 2])
    normalized = (p.popart.normalize(values, obs) - p.popart.normalize(targets, obs)) ** 2
    assert v_loss == pytest.approx(0.5 * float(normalized.mean()), rel=1e-4)
    assert v_loss < 10  # raw targets up to ~1e6 would give a loss ~1e12


def test_observations_without_a_task_one_hot_are_refused():
    pop = PopArt(2)
    obs = torch.randn(4, 5)
    with pytest.raises(ValueError, match="last 2 entries of every observation must be a one-hot"):
        pop.moments(torch.zeros(4), obs)
    with pytest.raises(ValueError, match="wider than the observations"):
        ActorCritic(3, SPACE, PolicyConfig(popart_tasks=4))


def test_popart_is_refused_for_episodic_suites():
    from distrl.args import parse_train_args
    from distrl.session import check_before_start

    cfg = parse_train_args(["reach10", "--policy.popart-tasks", "10"])
    with pytest.raises(ValueError, match="popart-tasks does not apply to reach10.*no critic"):
        check_before_start(cfg)
