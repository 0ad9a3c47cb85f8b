"""``distrl.PPO`` / ``DQN`` / ``SAC`` / ``TD3``: Stable-Baselines3's keywords mapped onto
distrl's config with SB3's meanings, ``learn`` / ``predict`` / ``save`` / ``load``, a callable
learning rate, a second ``learn`` that trains on, and the keywords distrl does not map refused
by name."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import distrl
from distrl.telemetry import read_metrics

pytestmark = pytest.mark.timeout(180)


def test_ppo_keywords_mean_what_they_mean_in_sb3():
    model = distrl.PPO("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=32, n_epochs=2,
                       learning_rate=1e-3, verbose=0)  # fmt: skip
    cfg = model.cfg
    assert (cfg.env.num_envs, cfg.agent.num_steps, cfg.agent.num_minibatches) == (1, 64, 2)
    assert cfg.agent.lr_schedule == "constant" and cfg.agent.learning_rate == 1e-3
    assert (cfg.agent.vf_coef, cfg.agent.max_grad_norm, cfg.agent.clip_vloss) == (0.5, 0.5, False)
    assert not cfg.policy.obs_normalization and not cfg.policy.reward_normalization
    assert cfg.policy.actor_hidden == (64, 64) and cfg.policy.activation == "tanh"
    defaults = distrl.PPO("MlpPolicy", "CartPole-v1").cfg.agent  # SB3's defaults
    assert (defaults.num_steps, defaults.num_minibatches, defaults.num_epochs) == (2048, 32, 10)
    assert defaults.learning_rate == 3e-4 and defaults.ent_coef == 0.0


def test_verbose_0_prints_nothing_as_in_sb3(tmp_path, monkeypatch):
    """distrl's console lines all go through its logger (its console handler prints them); a
    handler of the test's own sees what reaches the console."""
    import logging

    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(str(record.msg))  # type: ignore[method-assign]
    logger, level = logging.getLogger("distrl"), logging.getLogger("distrl").level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)  # a user's handler, at the level distrl's own would have
    monkeypatch.chdir(tmp_path)
    try:
        model = distrl.PPO("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, verbose=0)
        model.learn(total_timesteps=64)
        assert seen == []
        model = distrl.PPO("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32)
        model.learn(total_timesteps=64)  # verbose=1, SB3's default: distrl's lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert any("distrl: task gym:CartPole-v1" in m for m in seen), seen


def test_n_steps_is_sb3s_n_step_returns_for_the_off_policy_learners():
    for cls in (distrl.DQN, distrl.SAC, distrl.TD3):
        env = "CartPole-v1" if cls is distrl.DQN else "Pendulum-v1"
        assert cls("MlpPolicy", env, n_steps=3).cfg.offpolicy.n_step == 3
        assert cls("MlpPolicy", env).cfg.offpolicy.n_step == 1  # SB3's default


def test_learn_predict_save_load_and_learn_again(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = distrl.PPO("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=16, n_epochs=1,
                       n_envs=4, learning_rate=lambda p: 1e-3 * p, verbose=0, seed=3)  # fmt: skip
    model.learn(total_timesteps=512)
    lrs = [r["lr"] for r in read_metrics(model.result.run_dir)]
    assert lrs[0] == pytest.approx(1e-3) and all(b < a for a, b in zip(lrs, lrs[1:], strict=False))
    obs, _ = gym.make("CartPole-v1").reset(seed=0)
    action, state = model.predict(obs, deterministic=True)
    assert state is None and int(action) in (0, 1)
    path = model.save(tmp_path / "ppo_cartpole")
    assert path.name == "ppo_cartpole.pt"
    again = distrl.PPO.load(tmp_path / "ppo_cartpole")
    assert np.array_equal(again.predict(obs, deterministic=True)[0], action)
    model.learn(total_timesteps=512)  # trains on in the same run directory
    assert model.num_timesteps == 1024
    assert [r["iteration"] for r in read_metrics(model.result.run_dir)] == list(range(1, 9))


@pytest.mark.parametrize("kwargs, says", [
    ({"use_sde": True}, "use_sde=True is not built"),
    ({"sde_thing": 1}, "sde_thing is not mapped"),
    ({"n_steps": 100, "batch_size": 64}, "not a multiple of batch_size=64"),
    ({"clip_range_vf": 0.5}, "clip_range_vf=0.5 differs"),
    ({"policy_kwargs": {"features_extractor_class": object}}, "not mapped onto distrl's policy"),
])  # fmt: skip
def test_what_distrl_does_not_map_is_refused_by_name(kwargs, says):
    with pytest.raises(ValueError, match=says):
        distrl.PPO("MlpPolicy", "CartPole-v1", **kwargs)


def test_sb3_callbacks_are_refused_naming_distrl_hooks(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = distrl.PPO("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, verbose=0)
    with pytest.raises(ValueError, match="distrl.Hooks"):
        model.learn(64, callback=object())


def test_off_policy_classes_map_their_keywords():
    sac = distrl.SAC("MlpPolicy", "Pendulum-v1", buffer_size=10_000, ent_coef=0.1).cfg
    assert sac.algorithm == "sac" and sac.offpolicy.buffer_size == 10_000
    assert sac.offpolicy.alpha == 0.1 and sac.offpolicy.learning_starts == 100
    # SB3's one env and train_freq 1: 2 steps and 2 updates an iteration (at least 2 samples)
    assert sac.offpolicy.batch_size == 256 and (sac.agent.num_steps, sac.offpolicy.updates) == (
        2,
        2,
    )
    dqn = distrl.DQN("MlpPolicy", "CartPole-v1", train_freq=4, gradient_steps=1).cfg
    # SB3 counts target_update_interval (10,000) in env steps; distrl in updates: 1 per 4 steps
    assert dqn.offpolicy.target_interval == 2500 and dqn.offpolicy.tau == 1.0
    assert (dqn.offpolicy.eps_fraction, dqn.offpolicy.eps_end) == (0.1, 0.05)
    td3 = distrl.TD3("MlpPolicy", "Pendulum-v1", policy_delay=3).cfg
    assert td3.offpolicy.policy_delay == 3 and td3.agent.learning_rate == 1e-3
