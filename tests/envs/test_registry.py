"""Task registry: names, default configs, env factories and helpful errors."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from distrl.config import EnvConfig, validate
from distrl.envs import VecEnv, default_config, get_task, list_tasks, make_env
from distrl.envs.acrobot import Acrobot
from distrl.envs.cartpole import CartPole
from distrl.envs.gym import GymVecEnv
from distrl.envs.pendulum import Pendulum
from distrl.envs.registry import is_user_task


def test_list_tasks() -> None:
    names = [t.name for t in list_tasks()]
    assert names[:3] == ["cartpole", "acrobot", "pendulum"]
    for gym_id in ("CartPole-v1", "Acrobot-v1", "Pendulum-v1", "HalfCheetah-v5"):
        assert f"gym:{gym_id}" in names
    cheetah = next(t for t in list_tasks() if t.name == "gym:HalfCheetah-v5")
    assert "mujoco" in cheetah.description


@pytest.mark.parametrize(
    ("name", "cls", "limit"),
    [("cartpole", CartPole, 500), ("acrobot", Acrobot, 500), ("pendulum", Pendulum, 200)],
)
def test_builtin_factories(name: str, cls: type, limit: int) -> None:
    task = get_task(name)
    env = task.make_env(4, torch.device("cpu"), None)
    assert isinstance(env, cls) and env.num_envs == 4 and env.max_episode_steps == limit
    assert task.make_env(4, torch.device("cpu"), 9).max_episode_steps == 9


# built-in tasks: one registered (tests/fixtures registers some on import) shares its frozen config
@pytest.mark.parametrize("name", [t.name for t in list_tasks() if not is_user_task(t.name)])
def test_default_configs_are_valid_and_fresh(name: str) -> None:
    if name == "metaworld-mt10":
        pytest.importorskip("metaworld", reason="metaworld-mt10 needs the metaworld extra")
    cfg = default_config(name)
    assert cfg.task == name
    assert validate(cfg) is cfg
    assert default_config(name) == cfg and default_config(name) is not cfg


def test_default_config_values() -> None:
    cartpole = default_config("cartpole")
    assert cartpole.env.num_envs == 128 and cartpole.agent.num_steps == 32
    assert cartpole.agent.lr_schedule == "adaptive" and cartpole.agent.max_iterations == 100
    assert default_config("acrobot").agent.num_steps == 32
    pendulum = default_config("pendulum")
    assert pendulum.agent.max_iterations == 150 and pendulum.agent.lr_schedule == "linear"
    assert pendulum.policy.reward_normalization and cartpole.policy.reward_normalization
    # cartpole's update (2026-11-25): 3 epochs x 2 minibatches, no value clip, rewards scaled
    assert (cartpole.agent.num_epochs, cartpole.agent.num_minibatches) == (3, 2)
    assert not cartpole.agent.clip_vloss
    assert not default_config("gym:CartPole-v1").policy.reward_normalization  # no built-in twin
    # a Gymnasium id with a built-in twin trains with the twin's tuned settings
    assert default_config("gym:Pendulum-v1").agent == pendulum.agent
    assert default_config("gym:Pendulum-v1").task == "gym:Pendulum-v1"
    gym_cfg = default_config("gym:Acrobot-v1")
    assert gym_cfg.env.num_envs == 8 and gym_cfg.agent.num_steps == 128


def test_make_env_uses_config() -> None:
    cfg = dataclasses.replace(
        default_config("pendulum"), env=EnvConfig(num_envs=6, max_episode_steps=11)
    )
    env = make_env(cfg, "cpu")
    assert isinstance(env, Pendulum) and env.num_envs == 6 and env.max_episode_steps == 11
    assert env.reset(seed=0).shape == (6, 3)


def test_gym_task_built_on_demand() -> None:
    task = get_task("gym:MountainCar-v0")  # not among the listed examples
    env = task.make_env(2, torch.device("cpu"), 7)
    assert isinstance(env, GymVecEnv) and isinstance(env, VecEnv)
    assert env.max_episode_steps == 7 and env.reset(seed=0).shape == (2, 2)
    env.close()


def test_unknown_task_suggests_close_names() -> None:
    with pytest.raises(ValueError, match="cartpole") as info:
        get_task("cartpol")
    assert "distrl list" in str(info.value)
    with pytest.raises(ValueError, match="pendulum"):
        get_task("Pendulum")


def test_unknown_gym_id_suggests_gymnasium_ids() -> None:
    with pytest.raises(ValueError, match="gym:Acrobot-v1"):
        get_task("gym:Acrobat-v1")
