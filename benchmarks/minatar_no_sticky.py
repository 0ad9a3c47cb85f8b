"""MinAtar without sticky actions, as gymnax's JAX port steps it: the published PPO returns we set
beside ours (gymnax's README) come from that port, while distrl's ``minatar-*`` tasks follow the
reference ``minatar`` package, which repeats the previous action with probability 0.1.

    distrl train --import benchmarks.minatar_no_sticky minatar-breakout-no-sticky --nproc 2

registers ``minatar-<game>-no-sticky`` for the five games: the built-in task's env with
``sticky_action_prob=0`` and its defaults otherwise (difficulty ramps, time limits, PPO
settings), so a run isolates the one difference. Run it from the repository root, where
``benchmarks`` imports.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from distrl import register_task
from distrl.envs.core import VecEnv
from distrl.envs.minatar import GAMES
from distrl.envs.registry import get_task

SUFFIX = "-no-sticky"


def _no_sticky(game: str) -> Callable[[int, torch.device, int | None], VecEnv]:
    def make(num_envs: int, device: torch.device, max_episode_steps: int | None) -> VecEnv:
        return GAMES[game](num_envs, device, max_episode_steps, sticky_action_prob=0.0)

    return make


for _game in GAMES:
    _base = get_task("minatar-" + _game.replace("_", "-"))
    _name = _base.name + SUFFIX
    register_task(
        _name,
        make_env=_no_sticky(_game),
        default_config=dataclasses.replace(_base.default_config(), task=_name),
        description=_base.description.replace("sticky actions", "no sticky actions"),
        replace=True,
    )
