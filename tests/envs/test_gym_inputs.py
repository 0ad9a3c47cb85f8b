"""Any Gymnasium env as ``distrl.train`` / ``register_task(gym=)`` input: an id, an instance,
a factory, a ``gymnasium.vector.VectorEnv``; sync or async vectorization.

The equivalences that matter: each form trains the same policy from the same seed as task
``gym:CartPole-v1`` (a NEXT_STEP vector env, reset env by env, too), async vectorization
trains what sync does and its workers end however the run ends, and every refusal happens
before anything runs, naming the object and what to pass instead.
"""

from __future__ import annotations

import multiprocessing
import sys

import gymnasium
import pytest
from gymnasium.envs.classic_control import CartPoleEnv
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv
from gymnasium.wrappers import ClipReward

import distrl
from distrl.args import parse_train_args
from distrl.envs import make_env, registry
from tests.helpers import assert_same

pytestmark = pytest.mark.timeout(60)

N = 4
# 3 iterations x 16 steps: CartPole's episodes under the random first policy end (~20 steps)
# inside the run, so the autoreset paths are part of what must match
QUICK = {
    "agent": {"num_steps": 16, "num_epochs": 2, "max_iterations": 3},
    "seed": 7,
    "threads": 1,
    "progress": False,
    "tensorboard": False,
}


@pytest.fixture(autouse=True)
def _clean_registry():
    tasks = dict(registry._USER)
    yield
    registry._USER.clear()
    registry._USER.update(tasks)


def _cartpole() -> gymnasium.Env:
    return gymnasium.make("CartPole-v1")


def _train(source, tmp_path, name: str, **overrides) -> distrl.TrainResult:
    return distrl.train(source, run_dir=str(tmp_path / name), **(QUICK | overrides))


def _no_workers_left() -> None:
    assert multiprocessing.active_children() == []


# ---- every form trains what gym:CartPole-v1 trains ----------------------------------------
def test_an_id_an_instance_a_factory_and_a_vector_env_train_the_same(tmp_path):
    envs = {"env": {"num_envs": N}}
    reference = _train("gym:CartPole-v1", tmp_path, "reference", **envs)
    vector_env = gymnasium.make_vec("CartPole-v1", N, vectorization_mode="sync")
    assert vector_env.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP  # reset env by env
    runs = [
        ("gym:CartPole-v1", _train("CartPole-v1", tmp_path, "id", **envs)),
        ("gym:CartPole-v1", _train(gymnasium.make("CartPole-v1"), tmp_path, "instance", **envs)),
        ("env:_cartpole", _train(_cartpole, tmp_path, "factory", **envs)),
        ("env:CartPole-v1", _train(vector_env, tmp_path, "vector")),  # num_envs taken from it
    ]
    assert reference.metrics["episode_return_mean"] is not None  # episodes ended
    for task, result in runs:
        assert result.config.task == task and result.config.env.num_envs == N
        assert result.metrics["iteration"] == 3
        assert result.metrics["episode_return_mean"] == reference.metrics["episode_return_mean"]
        assert_same(result.policy.state_dict(), reference.policy.state_dict(), task)
    assert not vector_env.closed  # the caller's: stepped, not closed
    vector_env.close()


def test_async_vectorization_matches_sync_and_its_workers_end(tmp_path):
    envs = {"num_envs": N}
    sync = _train("CartPole-v1", tmp_path, "sync", env=envs)
    asynchronous = _train("CartPole-v1", tmp_path, "async", env=envs | {"vectorization": "async"})
    assert asynchronous.config.env.vectorization == "async"
    assert_same(asynchronous.policy.state_dict(), sync.policy.state_dict(), "async vs sync")
    assert asynchronous.metrics["episode_return_mean"] == sync.metrics["episode_return_mean"]
    _no_workers_left()

    class Stop(distrl.Hooks):
        def after_iteration(self, runner, record):
            assert isinstance(runner.env.vector_env, AsyncVectorEnv)
            assert len(multiprocessing.active_children()) == N  # one worker per env
            raise RuntimeError("stop here")

    try:  # a run stopped by an error
        _train(_cartpole, tmp_path, "stopped", env=envs | {"vectorization": "async"},
               hooks=[Stop()])  # fmt: skip
    except RuntimeError as e:
        error = e  # its traceback holds the run's frames, as a notebook's last error does
    assert str(error) == "stop here"
    _no_workers_left()


def test_the_command_line_takes_a_bare_id_and_async():
    cfg = parse_train_args(["CartPole-v1", "--env.vectorization", "async"])
    assert cfg.task == "gym:CartPole-v1" and cfg.env.vectorization == "async"
    assert distrl.make_config("Pendulum-v1").env.num_envs == 256  # gym:Pendulum-v1's tuning
    with pytest.raises(ValueError, match="--env.vectorization must be sync or async, got 'fork'"):
        distrl.make_config("CartPole-v1", env={"vectorization": "fork"})


# ---- instances: copies from env.spec -------------------------------------------------------
def test_a_changed_instance_is_copied_from_its_spec(tmp_path):
    assert registry.task_name(gymnasium.make("CartPole-v1", render_mode="rgb_array")) == (
        "gym:CartPole-v1"  # rendering is distrl's own business: the same task
    )
    clipped = ClipReward(gymnasium.make("CartPole-v1", max_episode_steps=30), -0.5, 0.5)
    name = registry.task_name(clipped)
    assert name == "env:CartPole-v1"
    env = make_env(distrl.make_config(name, env={"num_envs": 2}), "cpu")
    assert isinstance(env.vector_env.envs[0], ClipReward) and env.max_episode_steps == 30
    env.close()
    result = _train(clipped, tmp_path, "clipped", env={"num_envs": N})
    assert 0 < result.metrics["episode_return_mean"] <= 0.5 * 30  # clipped rewards, 30 steps


def test_register_task_takes_every_form(tmp_path):
    vector_env = SyncVectorEnv([_cartpole] * 2, autoreset_mode=AutoresetMode.SAME_STEP)
    forms = {
        "id": "CartPole-v1",
        "instance": _cartpole(),
        "factory": _cartpole,
        "vector": vector_env,
    }
    for form, gym in forms.items():
        task = distrl.register_task(f"my-{form}", gym=gym)
        assert task.gymnasium and distrl.make_config(f"my-{form}").task == f"my-{form}"
    assert distrl.make_config("my-vector").env.num_envs == 2
    result = _train("my-vector", tmp_path, "vector", eval={"interval": 1, "episodes": 3})
    assert result.metrics["eval/return_mean"] > 0  # 3 envs apart from the instance: copies
    vector_env.close()


# ---- refusals, before anything runs --------------------------------------------------------
class _Unrecorded(gymnasium.Wrapper):
    """A wrapper that does not record its arguments: env.spec cannot rebuild it."""


@pytest.mark.parametrize(
    "env, words",
    [
        (lambda: CartPoleEnv(),
         r"CartPoleEnv instance has no spec.*pass a factory of one env instead"),
        (lambda: _Unrecorded(_cartpole()),
         r"wrapped in _Unrecorded, which does not record its arguments.*pass a factory"),
        (lambda: 42, r"distrl.train takes a TrainConfig.*got an object of type int"),
        (lambda: gymnasium.make_vec("CartPole-v1", 2),  # CartPole's own, next-step resets
         r"CartPoleVectorEnv resets with AutoresetMode.NEXT_STEP.*vectorization_mode='sync'"),
        (lambda: AsyncVectorEnv([_cartpole] * 2, shared_memory=False),
         r"an AsyncVectorEnv without shared_memory cannot reset one env alone"),
    ],
)  # fmt: skip
def test_objects_distrl_cannot_step_are_named(env, words, tmp_path):
    made = env()
    with pytest.raises(ValueError, match=words):
        _train(made, tmp_path, "x")
    assert not (tmp_path / "x").exists()
    if isinstance(made, gymnasium.vector.VectorEnv):
        made.close()
    _no_workers_left()


@pytest.mark.parametrize(
    "overrides, words",
    [
        ({"env": {"num_envs": 8}}, r"--env.num-envs 8: task 'env:CartPole-v1' steps a "
         r"SyncVectorEnv instance of 2 envs.*leave --env.num-envs at 2"),
        ({"env": {"vectorization": "async"}}, r"build a gymnasium.vector.AsyncVectorEnv yourself"),
        ({"env": {"max_episode_steps": 50}}, r"wrap them in gymnasium.wrappers.TimeLimit"),
        ({"nproc": 2}, r"cannot travel to them; pass a factory of one env .* torchrun "
         r"--nproc-per-node 2 script.py"),
    ],
)  # fmt: skip
def test_a_vector_env_instance_refuses_what_it_cannot_honour(overrides, words, tmp_path):
    vector_env = gymnasium.make_vec("CartPole-v1", 2, vectorization_mode="sync")
    with pytest.raises(ValueError, match=words):
        _train(vector_env, tmp_path, "x", **overrides)
    assert not (tmp_path / "x").exists()
    vector_env.close()


def test_a_wrapped_vector_env_trains_but_cannot_be_copied(tmp_path):
    inner = gymnasium.make_vec("CartPole-v1", 2, vectorization_mode="sync")
    wrapped = gymnasium.wrappers.vector.RecordEpisodeStatistics(inner)
    with pytest.raises(ValueError, match=r"--eval.interval 1: .*cannot copy it"):
        _train(wrapped, tmp_path, "eval", eval={"interval": 1})
    result = _train(wrapped, tmp_path, "plain")
    assert result.policy is not None  # loaded with the instance's spaces
    with pytest.raises(ValueError, match="cannot copy it"):  # envs apart from it: refused
        make_env(distrl.make_config(result.config.task, env={"num_envs": 3}), "cpu").reset()
    wrapped.close()


def test_async_is_refused_on_a_torch_task(tmp_path):
    with pytest.raises(ValueError, match=r"task 'cartpole' steps batched torch envs itself"):
        _train("cartpole", tmp_path, "x", env={"vectorization": "async"})


# ---- missing dependencies name the extra to install ----------------------------------------
@pytest.mark.parametrize("env_id", ["LunarLander-v3", "BipedalWalker-v3", "CarRacing-v3"])
def test_box2d_envs_name_gymnasium_box2d(env_id, tmp_path):
    try:
        import Box2D  # noqa: F401

        pytest.skip("Box2D is installed here")
    except ImportError:
        pass
    with pytest.raises(ValueError, match=rf"gym:{env_id} needs.*pip install 'gymnasium\[box2d\]'"):
        _train(env_id, tmp_path, "x")
    distrl.register_task("mine", gym=env_id)
    with pytest.raises(ValueError, match=r"gymnasium\[box2d\]"):
        _train("mine", tmp_path, "y")


def test_atari_and_mujoco_ids_name_their_extras(monkeypatch, tmp_path):
    for key in [k for k in gymnasium.registry if k.startswith("ALE/")]:
        monkeypatch.delitem(gymnasium.registry, key)
    loaded = [m for m in sys.modules if m.startswith(("mujoco", "gymnasium.envs.mujoco."))]
    for name in loaded:  # imported again, as where they are missing
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "ale_py", None)  # import fails as if not installed
    monkeypatch.setitem(sys.modules, "mujoco", None)
    with pytest.raises(ValueError, match=r"gym:ALE/Pong-v5 is an Atari game and ale-py is missing"):
        _train("ALE/Pong-v5", tmp_path, "atari")
    with pytest.raises(ValueError, match=r"gym:Ant-v5 needs.*mujoco extra.*'\.\[mujoco\]'"):
        _train("Ant-v5", tmp_path, "ant")


def test_an_anonymous_factory_is_named_by_the_env_it_makes():
    """A lambda's task was 'env:lambda' (run directory runs/env_lambda/)."""
    from distrl.envs.registry import task_name

    assert task_name(lambda: gymnasium.make("CartPole-v1")) == "env:CartPole-v1"
