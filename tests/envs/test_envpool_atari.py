"""Atari through EnvPool (skipped without the envpool extra): uint8 [N, 4*84*84] rows, the VecEnv
contract (``check_env``), same-step resets that keep EnvPool's episodic-life semantics (a lost
life goes on with the same game, the last one starts a new one), episode statistics over whole
games, two iterations of ``distrl train atari-pong``; and the refusal without the extra."""

from __future__ import annotations

import sys

import pytest
import torch

import distrl
from distrl.envs import get_task
from tests.helpers import api_train


def test_without_envpool_the_task_names_the_extra(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "envpool", None)  # find_spec reports it missing
    with pytest.raises(ValueError, match=r"atari-pong needs the envpool extra.*\[envpool\]"):
        get_task("atari-pong").preflight()


def test_defaults_are_cleanrls() -> None:
    cfg = distrl.make_config("atari-breakout")
    a = cfg.agent
    assert (cfg.env.num_envs, a.num_steps, a.num_epochs, a.num_minibatches) == (8, 128, 4, 4)
    assert (a.learning_rate, a.lr_schedule, a.clip_coef) == (2.5e-4, "linear", 0.1)
    assert (a.ent_coef, a.clip_vloss, a.max_iterations) == (0.01, True, 9766)  # 10M / (8 x 128)
    assert (a.vf_coef, a.max_grad_norm, a.gamma, a.gae_lambda) == (0.5, 0.5, 0.99, 0.95)
    assert cfg.policy.network == "nature-cnn" and not cfg.policy.obs_normalization


@pytest.fixture
def one_thread():
    """EnvPool's worker threads spin while they wait: torch's own intra-op threads on the same
    cores then wait for a time slice (10 ms per op seen here); training runs one per rank."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_rows_contract_and_lives(one_thread) -> None:
    pytest.importorskip("envpool")
    from distrl.envs.envpool_atari import EnvPoolAtari

    env = EnvPoolAtari("Breakout-v5", 4)
    assert env.obs_shape == (4, 84, 84) and env.obs_dim == 4 * 84 * 84
    assert env.obs_dtype == torch.uint8 and env.action_space.n == 4
    obs = env.reset(seed=0)  # check_env resets with seed 0 too: the same pool
    assert obs.shape == (4, 28224) and obs.dtype == torch.uint8
    distrl.check_env(env, steps=16)
    env.reset(seed=0)
    g = torch.Generator().manual_seed(0)
    lives_lost = games = 0
    for _ in range(300):  # random play loses a life about every 25 steps, a game every 130
        obs, reward, term, trunc, info = env.step(torch.randint(4, (4,), generator=g))
        assert set(reward.tolist()) <= {-1.0, 0.0, 1.0}  # clipped
        done = term | trunc
        # the next life (or game) starts in the same step; final_obs ended the last one
        assert torch.equal(obs[~done], info["final_obs"][~done])
        frames, final = obs.view(4, 4, 84, 84), info["final_obs"].view(4, 4, 84, 84)
        for i in done.nonzero().flatten().tolist():
            assert not torch.equal(frames[i], final[i])
            if info["episode_end"][i]:  # a new game: its first frame, four times
                assert all(torch.equal(frames[i, k], frames[i, 0]) for k in range(1, 4))
            else:  # the next life: the stack goes on
                assert torch.equal(frames[i, :3], final[i, 1:])
        assert not (info["episode_end"] & ~done).any()  # a game ends only where an episode does
        lives_lost += int((term & ~info["episode_end"]).sum())
        games += int(info["episode_end"].sum())
    assert lives_lost >= 4 * games > 0  # Breakout's 5 lives: episodic life, not game resets
    env.close()


def test_train_two_iterations(tmp_path) -> None:
    pytest.importorskip("envpool")
    result = api_train("atari-pong", tmp_path / "run", num_envs=2, agent={"num_steps": 16})
    assert result.metrics["iteration"] == 2 and result.metrics["env_steps"] == 64
    assert result.policy.obs_dtype == torch.uint8
