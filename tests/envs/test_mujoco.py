"""Batched MuJoCo envs against Gymnasium's v5 envs, step for step.

Each step puts Gymnasium's env and ours in the same qpos/qvel (Gymnasium's own trajectory, so
drift cannot accumulate), applies the same action to both and compares the next observation,
reward and termination. Also: spaces and limits, same-step resets with ``final_obs``, truncation,
thread-count independence and bit-for-bit continuation after ``state_dict``.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

pytest.importorskip("mujoco", reason="needs the mujoco extra (make setup-mujoco)")
gymnasium = pytest.importorskip("gymnasium")

from distrl.envs.mujoco import ENVS, Ant, Hopper, MujocoVecEnv  # noqa: E402

IDS = sorted(ENVS)
N = 6  # Gymnasium envs stepped side by side with one batch of ours
STEPS = 120


def _actions(rng: np.random.Generator, n: int, nu: int, scale: float = 1.0) -> np.ndarray:
    return rng.uniform(-scale, scale, (n, nu)).astype(np.float32)


@pytest.mark.parametrize("env_id", IDS)
def test_matches_gymnasium_step_for_step(env_id: str) -> None:
    gym_envs = [gymnasium.make(env_id) for _ in range(N)]
    for i, e in enumerate(gym_envs):
        e.reset(seed=i)
    ours = ENVS[env_id](N)
    ours.reset(seed=0)
    rng = np.random.default_rng(0)
    terminations = 0
    for t in range(STEPS):
        datas = [e.unwrapped.data for e in gym_envs]
        qpos = np.stack([d.qpos for d in datas])
        qvel = np.stack([d.qvel for d in datas])
        for e, q, v in zip(gym_envs, qpos, qvel, strict=True):
            e.unwrapped.set_state(q, v)
        ours.set_state(qpos, qvel, np.stack([d.qacc_warmstart for d in datas]))
        actions = _actions(rng, N, ours.nu)

        obs, reward, terminated, truncated, info = ours.step(torch.from_numpy(actions))
        ref = [e.step(a) for e, a in zip(gym_envs, actions, strict=True)]
        ref_obs = torch.from_numpy(np.stack([r[0] for r in ref])).float()
        ref_reward = torch.tensor([r[1] for r in ref], dtype=torch.float32)
        ref_terminated = torch.tensor([r[2] for r in ref])

        final = info["final_obs"]
        torch.testing.assert_close(final, ref_obs, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(reward, ref_reward, rtol=1e-5, atol=1e-5)
        assert torch.equal(terminated, ref_terminated), t
        assert not truncated.any()
        assert torch.equal(obs[~terminated], final[~terminated])
        if terminated.any():  # reset in the same step
            assert not torch.equal(obs[terminated], final[terminated])
        for e, done in zip(gym_envs, ref_terminated.tolist(), strict=True):
            if done:
                terminations += 1
                e.reset(seed=1000 + t)
    for e in gym_envs:
        e.close()
    if env_id != "HalfCheetah-v5":  # random actions topple the others: terminations are tested
        assert terminations > 0


def test_ant_follows_gymnasium_without_resetting_state() -> None:
    """Ant's forward speed comes from the torso's xpos that mj_step leaves behind (the last
    Runge-Kutta stage of the last substep), carried from one step to the next."""
    gym_envs = [gymnasium.make("Ant-v5") for _ in range(3)]
    for i, e in enumerate(gym_envs):
        e.reset(seed=i)
    ours = Ant(3)
    datas = [e.unwrapped.data for e in gym_envs]
    ours.set_state(np.stack([d.qpos for d in datas]), np.stack([d.qvel for d in datas]))
    rng = np.random.default_rng(1)
    for _ in range(20):
        actions = _actions(rng, 3, ours.nu, scale=0.3)  # gentle: the ant stays healthy
        _, reward, terminated, _, info = ours.step(torch.from_numpy(actions))
        ref = [e.step(a) for e, a in zip(gym_envs, actions, strict=True)]
        assert not terminated.any() and not any(r[2] for r in ref)
        ref_obs = torch.from_numpy(np.stack([r[0] for r in ref])).float()
        torch.testing.assert_close(info["final_obs"], ref_obs, rtol=1e-5, atol=1e-5)
        ref_reward = torch.tensor([r[1] for r in ref], dtype=torch.float32)
        torch.testing.assert_close(reward, ref_reward, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(ours.qpos, np.stack([d.qpos for d in datas]), atol=1e-10)


@pytest.mark.parametrize("env_id", IDS)
def test_spaces_limits_and_reset_distribution(env_id: str) -> None:
    ref = gymnasium.make(env_id)
    ours = ENVS[env_id](64)
    assert ours.obs_dim == ref.observation_space.shape[0]
    space = ours.action_space
    assert space.kind == "continuous"
    assert np.array_equal(np.array(space.low, np.float32), ref.action_space.low)
    assert np.array_equal(np.array(space.high, np.float32), ref.action_space.high)
    assert ours.max_episode_steps == ref.spec.max_episode_steps == 1000
    obs = ours.reset(seed=3)
    assert obs.dtype == torch.float32 and obs.shape == (64, ours.obs_dim)
    assert torch.equal(obs, ENVS[env_id](64).reset(seed=3))  # the seed decides the episodes
    init_qpos = ref.unwrapped.init_qpos
    scale = ours.reset_noise_scale
    assert np.abs(ours.qpos - init_qpos).max() <= scale
    assert np.abs(ours.qpos - init_qpos).max() > scale / 2  # the noise is there
    if ours.qvel_noise == "uniform":
        assert np.abs(ours.qvel).max() <= scale
    else:  # scale * N(0, 1)
        assert abs(ours.qvel.std() / scale - 1.0) < 0.1
    ref.close()


@pytest.mark.parametrize("env_id", IDS)
def test_truncation_at_time_limit(env_id: str) -> None:
    limit = 4
    env = ENVS[env_id](8, max_episode_steps=limit)
    env.reset(seed=0)
    for t in range(1, 2 * limit + 1):
        zeros = torch.zeros(8, env.nu)
        obs, reward, terminated, truncated, info = env.step(zeros)
        assert not terminated.any()  # no action, 4 steps: nothing falls
        if t % limit:
            assert not truncated.any() and torch.equal(obs, info["final_obs"])
        else:
            assert truncated.all() and not torch.equal(obs, info["final_obs"])
            assert torch.isfinite(info["final_obs"]).all()
    assert env.elapsed.tolist() == [0] * 8


def test_hopper_termination_resets_in_same_step() -> None:
    env = Hopper(2)
    env.reset(seed=0)
    qpos, qvel = env.qpos, env.qvel
    qpos[0, 1] = 0.5  # below the healthy z range (0.7, inf)
    env.set_state(qpos, qvel)
    obs, reward, terminated, truncated, info = env.step(torch.zeros(2, env.nu))
    assert terminated.tolist() == [True, False]
    assert reward[0].abs() < 0.5 < reward[1]  # no healthy reward on the terminating step
    assert info["final_obs"][0, 0] < 0.7  # obs[0] is z: the fallen hopper
    assert abs(obs[0, 0] - 1.25) <= 5e-3  # a fresh start (init z 1.25 plus noise)
    assert torch.equal(obs[1], info["final_obs"][1])
    assert env.elapsed.tolist() == [0, 1]


def _run(env: MujocoVecEnv, steps: int, seed: int) -> list[torch.Tensor]:
    """Every output of ``steps`` steps under uniform random actions drawn from ``seed``."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        actions = torch.rand(env.num_envs, env.nu, generator=g) * 2 - 1
        obs, reward, terminated, truncated, info = env.step(actions)
        out += [obs, reward, terminated, truncated, info["final_obs"]]
    return out


@pytest.mark.parametrize("env_id", IDS)
def test_thread_count_does_not_change_results(env_id: str) -> None:
    one = ENVS[env_id](16, max_episode_steps=5, num_threads=1)
    two = ENVS[env_id](16, max_episode_steps=5, num_threads=2)
    one.reset(seed=5)
    two.reset(seed=5)
    assert all(torch.equal(a, b) for a, b in zip(_run(one, 12, 6), _run(two, 12, 6), strict=True))
    one.close()
    two.close()


@pytest.mark.parametrize("env_id", ["Hopper-v5", "Ant-v5"])
def test_state_dict_continues_bit_for_bit(env_id: str) -> None:
    env = ENVS[env_id](8, max_episode_steps=6)  # resets happen after the snapshot
    env.reset(seed=11)
    _run(env, 9, seed=1)
    buf = io.BytesIO()
    torch.save(env.state_dict(), buf)
    expected = _run(env, 15, seed=2)

    resumed = ENVS[env_id](8)
    resumed.reset(seed=999)
    buf.seek(0)
    resumed.load_state_dict(torch.load(buf, weights_only=False))
    assert resumed.max_episode_steps == 6
    got = _run(resumed, 15, seed=2)
    assert all(torch.equal(a, b) for a, b in zip(expected, got, strict=True))
    with pytest.raises(ValueError, match="num-envs"):
        ENVS[env_id](4).load_state_dict(env.state_dict())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_tensors_on_cuda() -> None:
    env = Ant(4, "cuda")
    obs = env.reset(seed=0)
    out = env.step(torch.zeros(4, env.nu, device="cuda"))
    assert obs.device.type == "cuda"
    assert all(x.device.type == "cuda" for x in (*out[:4], out[4]["final_obs"]))
