"""Built-in torch envs against Gymnasium: one step from the same state gives the same result.

For many random states and actions we set the Gymnasium env's ``unwrapped.state`` directly, step it
once, and compare observation, reward and termination with one batched step of our env from the
same states. Also: time-limit truncation, same-step resets with ``final_obs``, and bit-for-bit
continuation after ``state_dict``/``load_state_dict``.
"""

from __future__ import annotations

import io
import math

import gymnasium
import numpy as np
import pytest
import torch

from distrl.envs.acrobot import Acrobot
from distrl.envs.cartpole import CartPole
from distrl.envs.pendulum import Pendulum
from distrl.envs.torch_vec import TorchVecEnv

N = 400  # states compared per env (each costs one Python-level Gymnasium step)
ENVS = {"cartpole": CartPole, "acrobot": Acrobot, "pendulum": Pendulum}


def _uniform(g: torch.Generator, n: int, high: list[float], dtype=torch.float32) -> torch.Tensor:
    high_t = torch.tensor(high, dtype=torch.float64)
    return ((torch.rand(n, len(high), generator=g, dtype=torch.float64) * 2 - 1) * high_t).to(dtype)


def _random_actions(env: TorchVecEnv, g: torch.Generator) -> torch.Tensor:
    if env.action_space.discrete:
        return torch.randint(0, env.action_space.n, (env.num_envs,), generator=g)
    # 1.5x the bounds so that clipping inside step is exercised too
    return (torch.rand(env.num_envs, 1, generator=g) * 2 - 1) * 3.0


def _gym_step(gym_env, state: np.ndarray, action) -> tuple[np.ndarray, float, bool, bool]:
    u = gym_env.unwrapped
    u.state = state
    if hasattr(u, "steps_beyond_terminated"):
        u.steps_beyond_terminated = None
    obs, reward, terminated, truncated, _ = u.step(action)
    return obs, float(reward), bool(terminated), bool(truncated)


def _compare_one_step(
    ours: TorchVecEnv,
    gym_id: str,
    states: torch.Tensor,
    actions: torch.Tensor,
    gym_action,
    margin,
) -> None:
    """Step ``ours`` once from ``states``; compare each row with Gymnasium from the same state.

    ``margin(obs)`` says how far a Gymnasium observation is from the termination boundary; rows
    closer than float rounding can decide are excluded from the termination comparison.
    """
    ours.reset(seed=0)
    ours.state = states.to(ours.state_dtype).clone()
    obs, reward, terminated, truncated, info = ours.step(actions)
    final = info["final_obs"]
    assert obs.dtype == final.dtype == reward.dtype == torch.float32
    assert obs.shape == final.shape == (ours.num_envs, ours.obs_dim)
    assert terminated.dtype == truncated.dtype == torch.bool
    assert not truncated.any()
    # rows that did not end: obs is the next state, identical to final_obs
    assert torch.equal(obs[~terminated], final[~terminated])

    gym_env = gymnasium.make(gym_id)
    gym_env.reset(seed=0)
    ref_obs, ref_reward, ref_term = [], [], []
    for i in range(ours.num_envs):
        o, r, te, tr = _gym_step(gym_env, states[i].double().numpy(), gym_action(actions[i]))
        assert not tr
        ref_obs.append(o)
        ref_reward.append(r)
        ref_term.append(te)
    gym_env.close()
    ref_obs_t = torch.from_numpy(np.stack(ref_obs)).float()
    torch.testing.assert_close(final, ref_obs_t, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(reward, torch.tensor(ref_reward, dtype=torch.float32))
    decidable = torch.tensor([margin(o) > 1e-5 for o in ref_obs])
    assert decidable.float().mean() > 0.9
    assert torch.equal(terminated[decidable], torch.tensor(ref_term)[decidable])
    # rows that ended were reset in the same step: obs differs from the final observation
    if terminated.any():
        assert not torch.equal(obs[terminated], final[terminated])


def test_cartpole_matches_gymnasium() -> None:
    g = torch.Generator().manual_seed(0)
    # States up to the thresholds (2.4, 12 deg) with fast velocities: many rows terminate.
    states = _uniform(g, N, [2.4, 3.0, 0.2094, 3.0])
    actions = torch.randint(0, 2, (N,), generator=g)

    def margin(o: np.ndarray) -> float:
        return min(abs(abs(o[0]) - 2.4), abs(abs(o[2]) - 12 * 2 * math.pi / 360))

    env = CartPole(N)
    _compare_one_step(env, "CartPole-v1", states, actions, lambda a: int(a), margin)
    assert env.action_space.discrete and env.action_space.n == 2
    assert env.max_episode_steps == 500


def test_acrobot_matches_gymnasium() -> None:
    g = torch.Generator().manual_seed(1)
    # Full state range: angles wrap around +-pi and velocities hit the 4pi / 9pi clip.
    states = _uniform(g, N, [math.pi, math.pi, 4 * math.pi, 9 * math.pi], dtype=torch.float64)
    actions = torch.randint(0, 3, (N,), generator=g)

    def margin(o: np.ndarray) -> float:
        # -cos(t1) - cos(t1 + t2) = -cos t1 - (cos t1 cos t2 - sin t1 sin t2)
        height = -o[0] - (o[0] * o[2] - o[1] * o[3])
        return abs(height - 1.0)

    env = Acrobot(N)
    _compare_one_step(env, "Acrobot-v1", states, actions, lambda a: int(a), margin)
    assert env.action_space.n == 3 and env.max_episode_steps == 500


def test_pendulum_matches_gymnasium() -> None:
    g = torch.Generator().manual_seed(2)
    # Unwrapped angles (|th| up to 3 pi) and velocities near the 8 rad/s clip.
    states = _uniform(g, N, [3 * math.pi, 8.0])
    env = Pendulum(N)
    actions = _random_actions(env, g)

    def gym_action(a: torch.Tensor) -> np.ndarray:
        return a.numpy().astype(np.float32)

    _compare_one_step(env, "Pendulum-v1", states, actions, gym_action, lambda o: 1.0)
    space = env.action_space
    assert space.kind == "continuous" and space.low == (-2.0,) and space.high == (2.0,)
    assert env.max_episode_steps == 200


@pytest.mark.parametrize("name", sorted(ENVS))
def test_truncation_at_time_limit(name: str) -> None:
    limit = 5  # too short for any of the three to terminate from its start distribution
    env = ENVS[name](16, max_episode_steps=limit)
    g = torch.Generator().manual_seed(3)
    obs = env.reset(seed=3)
    for t in range(1, 3 * limit + 1):
        prev = obs
        obs, reward, terminated, truncated, info = env.step(_random_actions(env, g))
        final = info["final_obs"]
        assert not terminated.any()
        if t % limit:
            assert not truncated.any()
            assert torch.equal(obs, final)
        else:
            assert truncated.all()
            # final_obs continues the old episode; obs starts a new one
            assert not torch.equal(obs, final)
            assert torch.isfinite(final).all()
        assert not torch.equal(final, prev)


def test_cartpole_termination_resets_in_same_step() -> None:
    env = CartPole(3)
    env.reset(seed=0)
    env.state = torch.tensor(
        [[2.39, 5.0, 0.0, 0.0], [0.0, 0.0, 0.2, 3.0], [0.0, 0.0, 0.0, 0.0]], dtype=torch.float32
    )
    obs, reward, terminated, truncated, info = env.step(torch.tensor([1, 1, 0]))
    assert terminated.tolist() == [True, True, False]
    assert not truncated.any()
    assert reward.tolist() == [1.0, 1.0, 1.0]  # CartPole-v1 rewards the terminating step too
    final = info["final_obs"]
    assert final[0, 0] > 2.4 and final[1, 2] > 12 * 2 * math.pi / 360
    assert obs[:2].abs().max() <= 0.05  # fresh start states
    assert torch.equal(obs[2], final[2])
    assert env.elapsed.tolist() == [0, 0, 1]


def test_acrobot_termination_reward_zero() -> None:
    env = Acrobot(2)
    env.reset(seed=0)
    env.state = torch.tensor([[math.pi, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    obs, reward, terminated, truncated, info = env.step(torch.tensor([1, 1]))
    assert terminated.tolist() == [True, False]
    assert reward.tolist() == [0.0, -1.0]
    assert info["final_obs"][0, 0] < -0.99  # cos(t1) ~ -1: the link points up
    assert obs[0, 0] > 0.99  # reset near hanging down


@pytest.mark.parametrize("name", sorted(ENVS))
def test_state_dict_continues_bit_for_bit(name: str) -> None:
    def run(env: TorchVecEnv, steps: int, seed: int) -> list[torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        out = []
        for _ in range(steps):
            obs, reward, terminated, truncated, info = env.step(_random_actions(env, g))
            out += [obs, reward, terminated, truncated, info["final_obs"]]
        return out

    # A short time limit so that resets (and the generator) are exercised after the snapshot.
    env = ENVS[name](32, max_episode_steps=7)
    env.reset(seed=11)
    run(env, 17, seed=1)
    buf = io.BytesIO()
    torch.save(env.state_dict(), buf)  # as a checkpoint would
    expected = run(env, 40, seed=2)

    resumed = ENVS[name](32)
    resumed.reset(seed=999)
    buf.seek(0)
    resumed.load_state_dict(torch.load(buf, weights_only=False))
    assert resumed.max_episode_steps == 7
    got = run(resumed, 40, seed=2)
    assert all(torch.equal(a, b) for a, b in zip(expected, got, strict=True))

    # the same seed reproduces the same episodes
    a, b = ENVS[name](32), ENVS[name](32)
    assert torch.equal(a.reset(seed=5), b.reset(seed=5))
    assert all(torch.equal(x, y) for x, y in zip(run(a, 20, 3), run(b, 20, 3), strict=True))


def test_load_state_dict_rejects_other_num_envs() -> None:
    state = CartPole(8).state_dict()
    with pytest.raises(ValueError, match="num-envs"):
        CartPole(16).load_state_dict(state)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", sorted(ENVS))
def test_cuda_matches_cpu(name: str) -> None:
    cpu, gpu = ENVS[name](64, max_episode_steps=3), ENVS[name](64, "cuda", max_episode_steps=3)
    g = torch.Generator().manual_seed(4)
    cpu.reset(seed=0)
    gpu.reset(seed=0)
    gpu.state = cpu.state.to("cuda")
    for _ in range(2):  # no resets yet: the dynamics alone must agree
        actions = _random_actions(cpu, g)
        c = cpu.step(actions)
        d = gpu.step(actions.to("cuda"))
        for x, y in zip(c[:4], d[:4], strict=True):
            assert y.device.type == "cuda"
            torch.testing.assert_close(x, y.cpu(), atol=1e-5, rtol=1e-5)
    obs, _, _, truncated, info = gpu.step(_random_actions(cpu, g).to("cuda"))
    assert truncated.all() and not torch.equal(obs, info["final_obs"])
    state = gpu.state_dict()
    expected = [gpu.step(torch.zeros_like(_random_actions(cpu, g)).to("cuda"))[0] for _ in range(5)]
    gpu.load_state_dict(state)
    got = [gpu.step(torch.zeros_like(_random_actions(cpu, g)).to("cuda"))[0] for _ in range(5)]
    assert all(torch.equal(a, b) for a, b in zip(expected, got, strict=True))
