"""GymVecEnv: shapes, dtypes, action spaces and same-step resets with a correct ``final_obs``.

The reference for ``final_obs`` is a plain single Gymnasium env stepped with the same seed and
actions (Gymnasium seeds vector sub-env i with seed + i).
"""

from __future__ import annotations

import math

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

from distrl.envs.gym import GymVecEnv


def _reference_run(env_id: str, seed: int, actions: list, max_episode_steps: int | None) -> list:
    """Observations of one Gymnasium env (reset after each episode) stepped with ``actions``."""
    env = gymnasium.make(env_id, max_episode_steps=max_episode_steps)
    env.reset(seed=seed)
    out = []
    for a in actions:
        obs, _, terminated, truncated, _ = env.step(a)
        out.append((obs, terminated, truncated))
        if terminated or truncated:
            env.reset()
    env.close()
    return out


def test_cartpole_shapes_and_truncation() -> None:
    n, limit = 3, 4
    env = GymVecEnv("CartPole-v1", n, "cpu", max_episode_steps=limit, seed=7)
    assert env.vector_env.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    assert env.action_space.discrete and env.action_space.n == 2
    assert env.obs_dim == 4 and env.max_episode_steps == limit
    obs = env.reset()
    assert obs.shape == (n, 4) and obs.dtype == torch.float32
    actions = [torch.tensor([t % 2, 1, 0]) for t in range(2 * limit)]
    refs = [
        _reference_run("CartPole-v1", 7 + i, [int(a[i]) for a in actions], limit) for i in range(n)
    ]
    for t, a in enumerate(actions):
        obs, reward, terminated, truncated, info = env.step(a)
        final = info["final_obs"]
        assert obs.shape == final.shape == (n, 4) and obs.dtype == final.dtype == torch.float32
        assert reward.shape == (n,) and reward.dtype == torch.float32
        assert terminated.dtype == truncated.dtype == torch.bool
        assert not terminated.any()
        for i in range(n):
            ref_obs, ref_term, ref_trunc = refs[i][t]
            np.testing.assert_array_equal(final[i].numpy(), ref_obs)
            assert bool(truncated[i]) == ref_trunc
        if (t + 1) % limit == 0:
            assert truncated.all()
            assert (obs - final).abs().amax(dim=1).gt(0).all()
            assert obs.abs().max() <= 0.05  # reset states
        else:
            assert not truncated.any() and torch.equal(obs, final)
    env.close()


def test_cartpole_termination_final_obs() -> None:
    env = GymVecEnv("CartPole-v1", 2, seed=0)
    env.reset()
    seen = False
    for _ in range(100):  # always pushing right topples the pole within ~10 steps
        obs, reward, terminated, truncated, info = env.step(torch.ones(2, dtype=torch.long))
        assert torch.equal(obs[~terminated], info["final_obs"][~terminated])
        if terminated.any():
            seen = True
            final = info["final_obs"][terminated]
            assert ((final[:, 0].abs() > 2.4) | (final[:, 2].abs() > 12 * 2 * math.pi / 360)).all()
            assert obs[terminated].abs().max() <= 0.05
            assert (reward[terminated] == 1.0).all()
    assert seen
    env.close()


def test_pendulum_continuous_truncation() -> None:
    n, limit = 2, 5
    env = GymVecEnv("Pendulum-v1", n, max_episode_steps=limit, seed=3)
    space = env.action_space
    assert space.kind == "continuous" and space.low == (-2.0,) and space.high == (2.0,)
    assert env.obs_dim == 3
    obs = env.reset()
    assert obs.shape == (n, 3) and obs.dtype == torch.float32
    actions = [torch.full((n, 1), 0.5 * (t % 3 - 1)) for t in range(limit + 2)]
    refs = [
        _reference_run("Pendulum-v1", 3 + i, [a[i].numpy() for a in actions], limit)
        for i in range(n)
    ]
    for t, a in enumerate(actions):
        obs, reward, terminated, truncated, info = env.step(a)
        assert reward.dtype == torch.float32 and (reward <= 0).all()
        assert not terminated.any()
        assert truncated.all() == (t + 1 == limit)
        for i in range(n):
            np.testing.assert_array_equal(info["final_obs"][i].numpy(), refs[i][t][0])
        if t + 1 == limit:
            assert not torch.equal(obs, info["final_obs"])
    env.close()


def test_uses_default_time_limit() -> None:
    env = GymVecEnv("Pendulum-v1", 1)
    assert env.max_episode_steps == 200
    env.close()


def test_non_box_observation_is_rejected() -> None:
    with pytest.raises(ValueError, match="Box observation"):
        GymVecEnv("FrozenLake-v1", 2)


def test_next_step_native_vector_env_is_rejected() -> None:
    # CartPole's native vector env only resets on the next step; it cannot serve the contract.
    with pytest.raises(ValueError, match="SAME_STEP"):
        GymVecEnv("CartPole-v1", 2, vectorization_mode="vector_entry_point")


def test_unknown_id_names_close_ids() -> None:
    with pytest.raises(ValueError, match="CartPole-v1"):
        GymVecEnv("CartPol-v1", 2)
