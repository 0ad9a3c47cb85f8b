"""`distrl play <run-dir|checkpoint> --episodes N`: evaluate the deterministic policy."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch
import tyro

from distrl import checkpoint as ckpt
from distrl.config import from_dict
from distrl.envs.registry import make_env
from distrl.policy import ActorCritic


@dataclass(frozen=True)
class PlayArgs:
    path: tyro.conf.Positional[str]
    """A run directory (its newest valid checkpoint is used) or a checkpoint file."""
    episodes: int = 10
    """Complete episodes to run."""
    num_envs: int | None = None
    """Parallel envs (default: min(episodes, 64))."""
    seed: int = 12345
    """Env seed (different from training seeds by default)."""
    device: str = "cpu"
    """Torch device."""


def evaluate(policy: ActorCritic, env, episodes: int, seed: int) -> torch.Tensor:
    """Returns of the first ``episodes`` episodes completed by the deterministic policy."""
    obs = env.reset(seed=seed)
    ep_ret = torch.zeros(env.num_envs, device=obs.device)
    done_returns: list[torch.Tensor] = []
    count = 0
    with torch.no_grad():
        while count < episodes:
            obs, rew, term, trunc, _ = env.step(policy.act_deterministic(obs))
            ep_ret += rew
            done = term | trunc
            if done.any():
                done_returns.append(ep_ret[done].clone())
                count += int(done.sum())
                ep_ret[done] = 0.0
    return torch.cat(done_returns)[:episodes]


def play(args: PlayArgs) -> torch.Tensor:
    if args.episodes < 1:
        raise ValueError(f"--episodes must be at least 1, got {args.episodes}")
    p = Path(args.path)
    if p.is_dir():
        path, _ = ckpt.resolve_resume(str(p), None)
    else:
        path = p
    if path is None:
        raise ValueError(f"no checkpoint found under {p}")
    state, manifest = ckpt.load_checkpoint(path, map_location=args.device)
    cfg = from_dict(manifest["config"])
    n = args.num_envs or min(args.episodes, 64)
    cfg = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, num_envs=n))
    device = torch.device(args.device)
    env = make_env(cfg, device)
    policy = ActorCritic(env.obs_dim, env.action_space, cfg.policy).to(device)
    policy.load_state_dict(state["policy"])
    policy.eval()
    returns = evaluate(policy, env, args.episodes, args.seed)
    env.close()
    std = float(returns.std()) if returns.numel() > 1 else 0.0
    print(
        f"{cfg.task}: {args.episodes} episodes, return {float(returns.mean()):.2f} ± {std:.2f} "
        f"(checkpoint {path}, iteration {manifest['iteration']})"
    )
    return returns
