"""``check_env``: step a VecEnv a few times and refuse what breaks the contract of ``core.py``.

For a user's own env before training on it (as Stable-Baselines3's ``check_env`` is): a wrong
shape or dtype is named here, with what was expected, instead of surfacing as a broadcasting
error inside the PPO update.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from distrl.envs.core import ActionSpace, VecEnv


def _expect(what: str, t: Any, shape: tuple[int, ...], dtype: torch.dtype, dev: torch.device):
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{what} must be a torch.Tensor, got {type(t).__name__}")
    if tuple(t.shape) != shape:
        raise ValueError(f"{what} has shape {tuple(t.shape)}, expected {shape}")
    if t.dtype != dtype:
        raise ValueError(f"{what} has dtype {t.dtype}, expected {dtype}")
    if t.device != dev:
        raise ValueError(f"{what} is on {t.device}, expected the env's device {dev}")
    if t.is_floating_point() and not bool(torch.isfinite(t).all()):
        raise ValueError(f"{what} holds NaN or Inf")


def random_actions(space: ActionSpace, n: int, device: torch.device, gen: torch.Generator):
    """Uniform valid actions: [n] int64 (discrete), [n, K] int64 (multi_discrete, component k
    in 0..nvec[k]-1) or [n, dim] float32 within the bounds (continuous)."""
    if space.discrete:
        return torch.randint(space.n, (n,), generator=gen).to(device)
    if space.categorical:
        u = torch.rand(n, len(space.nvec), generator=gen)
        return (u * torch.tensor(space.nvec)).long().to(device)
    low, high = torch.tensor(space.low), torch.tensor(space.high)
    u = torch.rand(n, len(space.low), generator=gen)
    return (low + u * (high - low)).float().to(device)


def check_env(env: VecEnv, steps: int = 64, seed: int = 0) -> None:
    """Reset ``env`` and take ``steps`` random steps, checking every shape, dtype and device
    of the VecEnv contract; raises ValueError naming the first violation. The env is left
    mid-episode: build a fresh one to train."""
    name = type(env).__name__
    try:
        n, obs_dim, space = env.num_envs, env.obs_dim, env.action_space
        device = torch.device(env.device)
        env.max_episode_steps  # noqa: B018 (the attribute must exist, None allowed)
    except AttributeError as e:
        raise ValueError(
            f"{name}: a VecEnv sets num_envs, obs_dim, action_space, device and "
            f"max_episode_steps in its constructor; missing: {e}"
        ) from e
    if not isinstance(space, ActionSpace):
        raise ValueError(
            f"{name}.action_space must be distrl.envs.core.ActionSpace, got {type(space).__name__}"
        )
    malformed = {
        "discrete": space.n < 1,
        "multi_discrete": not space.nvec or min(space.nvec) < 1,
        "continuous": len(space.low) != len(space.high) or not space.low,
    }
    if malformed.get(space.kind, True):
        raise ValueError(
            f"{name}.action_space is malformed: {space} (kind discrete with n >= 1, "
            f"multi_discrete with nvec of sizes >= 1, or continuous with low and high)"
        )
    for attr, value in (("num_envs", n), ("obs_dim", obs_dim)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}.{attr} must be a positive int, got {value!r}")
    shape, odt = tuple(env.obs_shape), env.obs_dtype
    if odt not in (torch.float32, torch.uint8):
        raise ValueError(f"{name}.obs_dtype must be torch.float32 or torch.uint8, got {odt}")
    if math.prod(shape) != obs_dim:
        raise ValueError(
            f"{name}.obs_shape {shape} holds {math.prod(shape)} entries but obs_dim is "
            f"{obs_dim}: the rows are the flattened observations"
        )
    obs = env.reset(seed=seed)
    _expect(f"{name}.reset() observations", obs, (n, obs_dim), odt, device)
    gen = torch.Generator().manual_seed(seed)
    for i in range(steps):
        out = env.step(random_actions(space, n, device, gen))
        if not isinstance(out, tuple) or len(out) != 5:
            raise ValueError(
                f"{name}.step() must return (obs, reward, terminated, truncated, info)"
            )
        obs, rew, term, trunc, info = out
        at = f"{name}.step() (step {i})"
        _expect(f"{at} observations", obs, (n, obs_dim), odt, device)
        _expect(f"{at} reward", rew, (n,), torch.float32, device)
        _expect(f"{at} terminated", term, (n,), torch.bool, device)
        _expect(f"{at} truncated", trunc, (n,), torch.bool, device)
        if not isinstance(info, dict) or "final_obs" not in info:
            raise ValueError(
                f"{at} info must be a dict with 'final_obs' (the observation that ended each "
                f"episode; equal to obs where no episode ended)"
            )
        _expect(f"{at} info['final_obs']", info["final_obs"], (n, obs_dim), odt, device)
        for key, dtype in (("score", torch.float32), ("episode_end", torch.bool)):
            if key in info:  # optional episode statistics (envs/core.py)
                _expect(f"{at} info[{key!r}]", info[key], (n,), dtype, device)
        running = ~(term | trunc)
        if not torch.equal(info["final_obs"][running], obs[running]):
            raise ValueError(
                f"{at}: info['final_obs'] differs from obs in envs whose episode did not end"
            )
