"""The Python API (``import distrl``): configs, training, your own env and network.

The equivalences that matter: ``distrl.train`` trains exactly what ``distrl train`` does, a run
repeated from its config.yaml trains the same policy, and a call leaves the caller's process
settings as they were.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import distrl
from distrl.envs import registry
from distrl.policy import networks
from tests.helpers import assert_same, final_state, run_main, tiny_train_args

pytestmark = pytest.mark.timeout(120)

TINY = tiny_train_args(16, max_iterations=3)


@pytest.fixture(autouse=True)
def _clean_registries():
    tasks, nets = dict(registry._USER), dict(networks._NETWORKS)
    yield
    registry._USER.clear()
    registry._USER.update(tasks)
    networks._NETWORKS.clear()
    networks._NETWORKS.update(nets)


def test_make_config_layers_defaults_words_and_overrides():
    cfg = distrl.make_config(
        "cartpole", "--agent.num-epochs", "3", agent={"learning_rate": 3e-4}, seed=7
    )
    assert cfg.task == "cartpole" and cfg.seed == 7
    assert cfg.agent.num_epochs == 3 and cfg.agent.learning_rate == 3e-4
    assert cfg.env.num_envs == registry.default_config("cartpole").env.num_envs  # task default
    cfg = distrl.make_config("cartpole", policy={"actor_hidden": [32, 32]})
    assert cfg.policy.actor_hidden == (32, 32)


def test_the_task_annotation_names_everything_train_takes():
    """``distrl.TaskLike``, in ``train``'s and ``make_config``'s signatures: a name or id, an
    env instance, a VectorEnv, a factory of one env (mypy holds callers to it)."""
    import collections.abc
    import typing

    import gymnasium

    kinds = {typing.get_origin(k) or k for k in typing.get_args(distrl.TaskLike)}
    assert kinds == {str, gymnasium.Env, gymnasium.vector.VectorEnv, collections.abc.Callable}
    train = set(typing.get_args(typing.get_type_hints(distrl.train)["cfg"]))
    assert set(typing.get_args(distrl.TaskLike)) | {distrl.TrainConfig, type(None)} == train
    assert typing.get_type_hints(distrl.make_config)["task"] == distrl.TaskLike


@pytest.mark.parametrize(
    "overrides, words",
    [
        ({"agent": {"learning_rat": 1e-3}}, ["agent.learning_rat", "agent.learning_rate"]),
        ({"sed": 1}, ["'sed'", "seed"]),
        ({"agent": {"num_minibatches": 5}}, ["not divisible by --agent.num-minibatches 5"]),
    ],
)
def test_make_config_refuses_bad_overrides(overrides, words):
    with pytest.raises(ValueError) as e:
        distrl.make_config("cartpole", **overrides)
    for w in words:
        assert w in str(e.value)


def test_train_matches_the_cli_bitwise_and_restores_process_settings(tmp_path, capsys):
    code, _, err = run_main(
        ["train", "cartpole", *TINY, "--run-dir", str(tmp_path / "cli")], capsys
    )
    assert code == 0, err

    torch.set_num_threads(1)
    torch.set_flush_denormal(False)  # the CLI run above turned it on in this process
    torch.manual_seed(1234)
    np.random.seed(5)
    random.seed(6)
    before = (torch.rand(3), np.random.rand(3), random.random())
    torch.manual_seed(1234)
    np.random.seed(5)
    random.seed(6)
    affinity = os.sched_getaffinity(0)
    cfg = distrl.make_config("cartpole", *TINY, run_dir=str(tmp_path / "api"))
    result = distrl.train(cfg)
    assert torch.get_num_threads() == 1
    assert os.sched_getaffinity(0) == affinity
    assert float(torch.tensor([1e-39]) * 1.0) != 0.0, "denormal flushing left on"
    after = (torch.rand(3), np.random.rand(3), random.random())
    assert torch.equal(before[0], after[0]) and np.array_equal(before[1], after[1])
    assert before[2] == after[2]

    assert result.is_main and result.run_dir == tmp_path / "api"
    assert result.checkpoint is not None and result.checkpoint.name == "ckpt_00000003.pt"
    assert result.metrics["iteration"] == 3
    cli_state = final_state(tmp_path / "cli", 3)
    assert_same(final_state(tmp_path / "api", 3)["policy"], cli_state["policy"])
    assert result.policy is not None and not result.policy.training
    assert_same(result.policy.state_dict(), cli_state["policy"])


def test_a_run_repeats_from_its_config_yaml(tmp_path, capsys):
    first = distrl.train(distrl.make_config("pendulum", *TINY, run_dir=str(tmp_path / "a")))
    cfg = distrl.load_config(first.run_dir / "config.yaml")
    assert cfg.run_dir is None and cfg.resume is None and not cfg.distributed
    assert cfg.agent.max_iterations == 3 and cfg.env.num_envs == 16
    code, _, err = run_main(
        ["train", "--config", str(first.run_dir / "config.yaml"), "--run-dir", str(tmp_path / "b")],
        capsys,
    )
    assert code == 0, err
    assert_same(final_state(tmp_path / "a", 3)["policy"], final_state(tmp_path / "b", 3)["policy"])


def test_config_file_mistakes_are_named(tmp_path, capsys):
    bad = tmp_path / "config.yaml"
    bad.write_text("task: cartpole\nagent:\n  num_epoch: 3\n")
    code, _, err = run_main(["train", "--config", str(bad)], capsys)
    assert code == 2 and "agent.num_epoch (did you mean num_epochs" in err
    bad.write_text("task: cartpole\n")
    code, _, err = run_main(["train", "acrobot", "--config", str(bad)], capsys)
    assert code == 2 and "contradicts --config" in err
    code, _, err = run_main(["train", "--config", str(tmp_path / "nope.yaml")], capsys)
    assert code == 2 and "no such file" in err


def test_total_timesteps_sets_the_iterations(tmp_path):
    result = distrl.train(
        distrl.make_config(
            "cartpole", *TINY, run_dir=str(tmp_path), agent={"total_timesteps": 1000}
        )
    )
    per_iteration = 16 * 8
    assert result.metrics["iteration"] == -(-1000 // per_iteration) == 8
    assert 1000 <= result.metrics["env_steps"] < 1000 + per_iteration
    assert result.config.agent.max_iterations == 8  # the config the run trained with
    with pytest.raises(ValueError, match="total-timesteps must be positive"):
        distrl.make_config("cartpole", agent={"total_timesteps": 0})


class _Line(distrl.VecEnv):
    """A tiny discrete env: reward 1 for action 1, 10-step episodes."""

    def __init__(self, num_envs, device, max_episode_steps=None, dtype=torch.float32):
        self.num_envs, self.obs_dim, self.device = num_envs, 3, torch.device(device)
        self.action_space = distrl.ActionSpace("discrete", n=2)
        self.max_episode_steps = max_episode_steps or 10
        self.t = torch.zeros(num_envs, dtype=torch.long, device=self.device)
        self.dtype = dtype

    def reset(self, seed=None):
        self.t.zero_()
        return torch.zeros(self.num_envs, 3, dtype=self.dtype, device=self.device)

    def step(self, actions):
        self.t += 1
        trunc = self.t >= self.max_episode_steps
        self.t[trunc] = 0
        obs = torch.zeros(self.num_envs, 3, dtype=self.dtype, device=self.device)
        term = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        return obs, actions.float(), term, trunc, {"final_obs": obs}


def test_own_env_registers_checks_and_trains(tmp_path):
    distrl.check_env(_Line(4, "cpu"))
    with pytest.raises(ValueError, match=r"observations has dtype torch.float64, expected"):
        distrl.check_env(_Line(4, "cpu", dtype=torch.float64))
    distrl.register_task("line", make_env=_Line)
    result = distrl.train("line", *[], run_dir=str(tmp_path), **_tiny_overrides())
    assert result.metrics["iteration"] == 3 and result.policy is not None
    assert "line" in [t.name for t in registry.list_tasks()]


class _ElsewhereLine(_Line):
    """Makes its tensors on another device than the one it was given (here: meta, as a CPU
    machine's stand-in for an env that ignores ``device`` and stays on the CPU under a GPU)."""

    def reset(self, seed=None):
        return super().reset(seed).to("meta")


def test_own_env_on_the_wrong_device_is_named_at_the_first_reset(tmp_path):
    distrl.register_task("line-elsewhere", make_env=_ElsewhereLine, replace=True)
    with pytest.raises(ValueError, match=r"reset\(\) returned observations on meta, but the policy "
                       r"trains on (cpu|cuda:0)"):  # fmt: skip
        distrl.train("line-elsewhere", run_dir=str(tmp_path), **_tiny_overrides())


def _tiny_overrides() -> dict:
    return {
        "env": {"num_envs": 16},
        "agent": {"num_steps": 8, "num_epochs": 2, "max_iterations": 3},
        "threads": 1,
        "progress": False,
        "tensorboard": False,
    }


def test_gymnasium_factory_task_trains(tmp_path):
    import gymnasium

    distrl.register_task("my-cartpole", gym=lambda: gymnasium.make("CartPole-v1"))
    result = distrl.train("my-cartpole", run_dir=str(tmp_path), **_tiny_overrides())
    assert result.metrics["iteration"] == 3


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"name": "cartpole", "make_env": _Line}, "built in"),
        ({"name": "gym:x", "make_env": _Line}, "not starting with 'gym:'"),
        ({"name": "x"}, "exactly one of make_env="),
        ({"name": "x", "make_env": _Line, "gym": _Line}, "exactly one of make_env="),
        ({"name": "x", "make_env": 3}, "is not callable"),
        ({"name": "x", "make_env": _Line, "default_config": {}}, "must be a TrainConfig"),
    ],
)
def test_register_task_mistakes(kwargs, words):
    with pytest.raises(ValueError, match=words):
        distrl.register_task(**kwargs)


def test_own_network_trains_and_bad_shapes_are_named(tmp_path):
    distrl.register_network(
        "wide", actor=lambda o, a: nn.Sequential(nn.Linear(o, 128), nn.ReLU(), nn.Linear(128, a)),
        critic=lambda o: nn.Linear(o, 1),
    )  # fmt: skip
    result = distrl.train("cartpole", run_dir=str(tmp_path), policy={"network": "wide"},
                          **_tiny_overrides())  # fmt: skip
    assert result.policy is not None and result.policy.actor[0].out_features == 128
    policy, cfg = distrl.load_policy(tmp_path)
    assert cfg.policy.network == "wide"
    assert_same(policy.state_dict(), result.policy.state_dict())

    distrl.register_network(
        "flat", actor=lambda o, a: nn.Linear(o, a), critic=lambda o: nn.Linear(o, 2)
    )
    with pytest.raises(ValueError, match=r"critic maps observations \(2, 4\) to \(2, 2\)"):
        distrl.train("cartpole", run_dir=str(tmp_path / "x"), policy={"network": "flat"},
                     **_tiny_overrides())  # fmt: skip
    with pytest.raises(ValueError, match="'nope' is not registered in this process"):
        distrl.train("cartpole", run_dir=str(tmp_path / "y"), policy={"network": "nope"},
                     **_tiny_overrides())  # fmt: skip
    with pytest.raises(ValueError, match="already registered"):
        distrl.register_network("wide", actor=nn.Linear, critic=nn.Linear)


@pytest.mark.parametrize("task", ["cartpole", "acrobot", "pendulum", "gym:CartPole-v1"])
def test_builtin_envs_pass_check_env(task):
    env = registry.make_env(distrl.make_config(task, env={"num_envs": 4}), "cpu")
    distrl.check_env(env, steps=600)  # past cartpole's and acrobot's 500-step limits
    env.close()


def test_distributed_without_torchrun_is_refused():
    with pytest.raises(ValueError, match="not started by torchrun"):
        distrl.train("cartpole", distributed=True)


def test_launching_a_script_registered_task_is_refused(tmp_path):
    distrl.register_task("line", make_env=_Line)
    with pytest.raises(ValueError, match="torchrun --nproc-per-node 2 script.py") as err:
        distrl.train("line", nproc=2, run_dir=str(tmp_path))
    assert not Path(tmp_path / "checkpoints").exists()
    # it names the task alone: the network (mlp) is distrl's own (it was named missing too)
    assert "task 'line' this script registered" in str(err.value)
    assert "network" not in str(err.value)
