"""The no-sticky MinAtar tasks are the built-in ones with one difference: no repeated actions."""

from __future__ import annotations

import dataclasses

import torch

import benchmarks.minatar_no_sticky  # noqa: F401 (registers the tasks)
from distrl.envs.registry import get_task

GAMES = ("asterix", "breakout", "freeway", "seaquest", "space-invaders")


def test_each_game_keeps_the_builtin_defaults_and_drops_sticky_actions():
    for game in GAMES:
        base, task = get_task(f"minatar-{game}"), get_task(f"minatar-{game}-no-sticky")
        assert dataclasses.replace(task.default_config(), task=base.name) == base.default_config()
        env, ref = task.make_env(8, torch.device("cpu"), None), base.make_env(8, "cpu", None)
        assert env.sticky_action_prob == 0.0 and ref.sticky_action_prob > 0.0
        assert env.max_episode_steps == ref.max_episode_steps


def test_without_sticky_actions_the_action_taken_is_the_action_given():
    env = get_task("minatar-breakout-no-sticky").make_env(256, torch.device("cpu"), None)
    env.reset(seed=0)
    full = torch.tensor(env.minimal_actions)  # the env remembers reference (full-set) ids
    for t in range(20):
        actions = torch.full((256,), t % 3)
        env.step(actions)
        assert torch.equal(env.last_action, full[actions])  # with 0.1, ~26 of 256 would not
