"""The MinAtar envs as VecEnvs: contract, registry, resume, options, CPU = GPU.
(Step-for-step agreement with the reference package: test_minatar_parity.py.)"""

from __future__ import annotations

import pytest
import torch

from distrl.envs import default_config, get_task
from distrl.envs.check import check_env
from distrl.envs.minatar import GAMES, Asterix, Breakout, Freeway, MinAtarEnv, SpaceInvaders

TASKS = {
    "minatar-asterix": (Asterix, 5, 4),
    "minatar-breakout": (Breakout, 3, 4),
    "minatar-freeway": (Freeway, 3, 7),
    "minatar-seaquest": (GAMES["seaquest"], 6, 10),
    "minatar-space-invaders": (SpaceInvaders, 4, 6),
}


def _rollout(env: MinAtarEnv, steps: int, seed: int) -> list[tuple[torch.Tensor, ...]]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        a = torch.randint(env.action_space.n, (env.num_envs,), generator=gen).to(env.device)
        obs, r, term, trunc, info = env.step(a)
        out.append((obs.cpu(), r.cpu(), term.cpu(), trunc.cpu(), info["final_obs"].cpu()))
    return out


@pytest.mark.parametrize("task", sorted(TASKS))
def test_registry_and_contract(task: str) -> None:
    cls, actions, channels = TASKS[task]
    env = get_task(task).make_env(5, torch.device("cpu"), None)
    assert type(env) is cls and env.num_envs == 5
    assert env.action_space.discrete and env.action_space.n == actions
    assert env.obs_shape == (channels, 10, 10) and env.obs_dim == channels * 100
    assert env.obs_dtype == torch.uint8
    assert env.max_episode_steps == (10_000 if cls is Freeway else 1000)
    assert get_task(task).make_env(2, torch.device("cpu"), 7).max_episode_steps == 7
    check_env(env, steps=200)
    cfg = default_config(task)
    assert cfg.policy.network == "minatar-cnn" and not cfg.policy.obs_normalization
    assert (cfg.env.num_envs, cfg.agent.num_steps) == (64, 128)
    assert (cfg.agent.num_epochs, cfg.agent.num_minibatches) == (4, 8)
    assert cfg.agent.lr_schedule == "linear" and cfg.agent.ent_coef == 0.01


@pytest.mark.parametrize("game", sorted(GAMES))
def test_resume_is_bit_for_bit(game: str) -> None:
    env = GAMES[game](6)
    env.reset(seed=3)
    _rollout(env, 60, seed=0)
    saved = env.state_dict()
    want = _rollout(env, 80, seed=1)
    other = GAMES[game](6)
    other.reset(seed=99)
    other.load_state_dict(saved)
    got = _rollout(other, 80, seed=1)
    for w, g in zip(want, got, strict=True):
        assert all(torch.equal(a, b) for a, b in zip(w, g, strict=True))


def test_load_refuses_another_game_or_size() -> None:
    saved = Breakout(4).state_dict()
    with pytest.raises(ValueError, match="fields"):
        Asterix(4).load_state_dict(saved)
    with pytest.raises(ValueError, match="num-envs"):
        Breakout(3).load_state_dict(saved)


@pytest.mark.parametrize("game", sorted(GAMES))
def test_same_seed_same_episodes(game: str) -> None:
    a, b = GAMES[game](4), GAMES[game](4)
    assert torch.equal(a.reset(seed=5), b.reset(seed=5))
    for x, y in zip(_rollout(a, 50, 0), _rollout(b, 50, 0), strict=True):
        assert all(torch.equal(p, q) for p, q in zip(x, y, strict=True))


def test_sticky_actions() -> None:
    # always sticky: every env keeps repeating its first action, no-op, so the paddle stays
    env = Breakout(8, sticky_action_prob=1.0)
    env.reset(seed=0)
    for _ in range(30):
        env.step(torch.full((8,), 2))  # right
        assert (env.state["pos"] == 4).all()
    # never sticky: the paddle goes right every step
    env = Breakout(8, sticky_action_prob=0.0)
    env.reset(seed=0)
    env.step(torch.full((8,), 2))
    assert (env.state["pos"] == 5).all()
    with pytest.raises(ValueError, match="sticky"):
        Breakout(2, sticky_action_prob=1.5)


def test_difficulty_ramping_off() -> None:
    env = Asterix(16, difficulty_ramping=False)
    env.reset(seed=0)
    _rollout(env, 400, seed=0)
    assert (env.state["spawn_speed"] == 10).all() and (env.state["ramp_index"] == 0).all()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("game", sorted(GAMES))
def test_cpu_and_gpu_agree(game: str) -> None:
    """The same uniforms and actions give the same steps on CPU and GPU (no host sync needed:
    the GPU path takes torch.where where the CPU path takes bit operations)."""
    n = 256
    cpu, gpu = GAMES[game](n), GAMES[game](n, "cuda")
    gen = torch.Generator().manual_seed(0)
    u0 = torch.rand(n, cpu.reset_draws, generator=gen)
    assert torch.equal(cpu.reset_with_uniforms(u0), gpu.reset_with_uniforms(u0.cuda()).cpu())
    for _ in range(500):
        a = torch.randint(cpu.action_space.n, (n,), generator=gen)
        u = torch.rand(n, cpu.num_draws, generator=gen)
        want = cpu.step_with_uniforms(a, u)
        got = gpu.step_with_uniforms(a.cuda(), u.cuda())
        for w, g in zip(want[:4], got[:4], strict=True):
            assert torch.equal(w, g.cpu())
        assert torch.equal(want[4]["final_obs"], got[4]["final_obs"].cpu())
