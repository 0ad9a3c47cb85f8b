"""The MuJoCo tasks in the registry: factories, PPO defaults, and the error without the extra."""

from __future__ import annotations

import sys

import pytest
import torch

import distrl.envs
from distrl.envs import default_config, get_task, list_tasks

TASKS = {"halfcheetah": "HalfCheetah", "hopper": "Hopper", "walker2d": "Walker2d", "ant": "Ant"}
try:
    import mujoco  # noqa: F401

    HAS_MUJOCO = True
except ModuleNotFoundError:
    HAS_MUJOCO = False


def test_listed_with_continuous_control_defaults() -> None:
    names = [t.name for t in list_tasks()]
    for name in TASKS:
        assert name in names
        cfg = default_config(name)
        # CleanRL's MuJoCo PPO: 2048 transitions per iteration in 32 minibatches, 10 epochs.
        assert cfg.batch_size == 2048 and cfg.minibatch_size == 64
        assert cfg.agent.num_epochs == 10 and cfg.agent.learning_rate == 3e-4
        assert cfg.agent.lr_schedule == "linear" and cfg.agent.ent_coef == 0.0
        assert cfg.agent.max_iterations * cfg.batch_size >= 999_000  # ~1M env steps


@pytest.mark.skipif(not HAS_MUJOCO, reason="needs the mujoco extra (make setup-mujoco)")
@pytest.mark.parametrize("name", sorted(TASKS))
def test_factories(name: str) -> None:
    from distrl.envs import mujoco

    task = get_task(name)
    env = task.make_env(4, torch.device("cpu"), None)
    assert type(env) is getattr(mujoco, TASKS[name])
    assert env.num_envs == 4 and env.max_episode_steps == 1000
    assert task.make_env(2, torch.device("cpu"), 9).max_episode_steps == 9


def test_missing_extra_names_the_fix(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "mujoco", None)  # `import mujoco` now fails as if absent
    monkeypatch.delitem(sys.modules, "distrl.envs.mujoco", raising=False)
    monkeypatch.delattr(distrl.envs, "mujoco", raising=False)
    with pytest.raises(ImportError, match="mujoco extra"):
        get_task("hopper").make_env(2, torch.device("cpu"), None)
