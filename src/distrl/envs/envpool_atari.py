"""Atari 2600 games through EnvPool (Weng et al. 2022, "EnvPool: A Highly Parallel
Reinforcement Learning Environment Execution Engine"), with the standard preprocessing of
CleanRL's ``ppo_atari_envpool.py``: the envs it makes (``envpool.make(game, num_envs=...,
episodic_life=True, reward_clip=True, seed=...)``) and EnvPool's Atari defaults, written out in
``SETTINGS`` so that another EnvPool version's defaults cannot change them: 4 frames skipped
(max-pooled over the last two), 84x84 grayscale (INTER_AREA resize), 4 frames stacked, up to 30
no-ops at reset, FIRE at reset in games that need it, a lost life ends the episode for the value
targets (episodic life; the game goes on), rewards clipped to their sign, the minimal action set,
no sticky actions (repeat_action_probability 0), 27,000 steps (108,000 frames) per game.

Rows: uint8 [N, 4 * 84 * 84] in (stack, H, W) order (``obs_shape`` (4, 84, 84)), for the
``nature-cnn`` network. The extra is ``envpool``
(``pip install -c constraints.txt -e '.[envpool]'``).

Resets. EnvPool 1.2.5 resets an env at its next step after the one that ended its episode
(Gymnasium's ``AutoresetMode.NEXT_STEP``: that step ignores its action, returns the first
observation and reward 0). The VecEnv contract resets in the same step, so ``step`` does that
reset step at once, for the done envs only (``pool.step(..., env_id)``): the returned ``obs``
rows of those envs are the first observations of their next episode (the next life after a lost
one, a fresh game after the last), and ``info["final_obs"]`` holds the observations that ended
them. An explicit ``pool.reset(env_id)`` would not do: it restarts the whole game, so a lost life
would restart the game and episodic life would never end one. The reset steps are not counted as
env steps (CleanRL's loop spends one policy step, with its action ignored, on each).

Episode statistics are of whole games and raw scores: ``info["score"]`` is the unclipped reward
and ``info["episode_end"]`` marks the end of a game (no lives left, or the step limit), not of a
life (``envs/core.py``).
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import numpy as np
import torch

from distrl.envs.core import ActionSpace, VecEnv
from distrl.install import pip_install

INSTALL_HINT = f"{pip_install('envpool')} (EnvPool 1.2.5, Linux x86-64)"

SETTINGS: dict[str, Any] = dict(
    episodic_life=True,
    reward_clip=True,
    frame_skip=4,
    stack_num=4,
    img_height=84,
    img_width=84,
    gray_scale=True,
    noop_max=30,
    use_fire_reset=True,
    repeat_action_probability=0.0,
    full_action_space=False,
)
"""EnvPool's Atari options as CleanRL's ppo_atari_envpool uses them (module docstring)."""

MAX_EPISODE_STEPS = 27_000
"""EnvPool's Atari default: 108,000 frames at frame skip 4 (30 minutes of play at 60 Hz)."""


def envpool_installed() -> bool:
    """Whether envpool can be imported (without importing it)."""
    return importlib.util.find_spec("envpool") is not None


class EnvPoolAtari(VecEnv):
    """``num_envs`` copies of an Atari game (EnvPool id, e.g. ``"Pong-v5"``) on ``device``.

    EnvPool fixes its seeds when the pool is made (env i gets seed + i), so the pool is made
    at ``reset(seed)`` (again when a later reset brings another seed). ``num_threads``: EnvPool's
    worker threads (default: one per env, at most the CPUs this process may run on). State
    cannot be saved: a resumed run starts fresh games."""

    obs_dtype = torch.uint8

    def __init__(
        self,
        game: str,
        num_envs: int,
        device: torch.device | str = "cpu",
        max_episode_steps: int | None = None,
        num_threads: int | None = None,
    ) -> None:
        try:
            import envpool
        except ImportError as e:
            raise ImportError(
                f"Atari through EnvPool needs the envpool extra: {INSTALL_HINT}"
            ) from e
        if game not in envpool.list_all_envs():
            raise ValueError(f"EnvPool has no Atari game {game!r} (e.g. Pong-v5, Breakout-v5)")
        self._envpool = envpool
        self.game, self.num_envs, self.device = game, num_envs, torch.device(device)
        self.max_episode_steps = max_episode_steps or MAX_EPISODE_STEPS
        h, w = SETTINGS["img_height"], SETTINGS["img_width"]
        self._obs_shape = (SETTINGS["stack_num"], h, w)
        self.obs_dim = int(np.prod(self._obs_shape))
        spec = envpool.make_spec(game, **SETTINGS)
        self.action_space = ActionSpace("discrete", n=int(spec.action_space.n))
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        self.num_threads = num_threads or min(num_envs, cpus or 1)
        self._pool: Any = None
        self._pool_seed: int | None = None

    @property
    def obs_shape(self) -> tuple[int, ...]:
        return self._obs_shape

    def _make_pool(self, seed: int) -> None:
        if self._pool is not None:
            self._pool.close()
        self._pool = self._envpool.make(
            self.game,
            env_type="gymnasium",
            num_envs=self.num_envs,
            batch_size=self.num_envs,
            num_threads=self.num_threads,
            seed=seed,
            max_episode_steps=self.max_episode_steps,
            **SETTINGS,
        )
        self._pool_seed = seed

    def _rows(self, obs: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(obs).reshape(obs.shape[0], -1)).to(self.device)

    def reset(self, seed: int | None = None) -> torch.Tensor:
        if self._pool is None or (seed is not None and seed != self._pool_seed):
            self._make_pool(0 if seed is None else seed)
        obs, _ = self._pool.reset()
        return self._rows(obs)

    def step(
        self, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        if self._pool is None:
            raise RuntimeError("EnvPoolAtari.step before reset(): reset the env first")
        a = actions.detach().cpu().numpy().astype(np.int32, copy=False)
        obs, reward, terminated, truncated, info = self._pool.step(a)
        final = self._rows(obs)
        done = terminated | truncated
        if done.any():
            # EnvPool resets a done env at its next step (module docstring): take that step
            # now for the done envs alone; their actions are ignored
            ids = np.flatnonzero(done).astype(np.int32)
            first, *_, reset_info = self._pool.step(np.zeros(len(ids), np.int32), ids)
            obs = obs.copy()
            obs[reset_info["env_id"]] = first
            next_obs = self._rows(obs)
        else:
            next_obs = final
        game_over = info["terminated"].astype(bool) | truncated
        dev = self.device
        return (
            next_obs,
            torch.as_tensor(reward, dtype=torch.float32).to(dev),
            torch.as_tensor(terminated, dtype=torch.bool).to(dev),
            torch.as_tensor(truncated, dtype=torch.bool).to(dev),
            {
                "final_obs": final,
                "score": torch.as_tensor(info["reward"], dtype=torch.float32).to(dev),
                "episode_end": torch.as_tensor(game_over, dtype=torch.bool).to(dev),
            },
        )

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
