"""Task registry: a task name maps to an env factory and a default training configuration.

Built-in tasks are the batched torch envs (``cartpole``, ``acrobot``, ``pendulum``, the memory
task ``cartpole-novel``, the five MinAtar games ``minatar-*``), Atari games through EnvPool
(``atari-breakout``, ``atari-pong``, with the envpool extra) and the multi-task episodic suites
(``reach10``; ``metaworld-mt10`` with the metaworld extra), which carry an ``EpisodicSuite`` and
train with the episodic RLOO runner. Any registered
Gymnasium id is available as ``gym:<Id>`` (built on demand, so the list below only shows examples).
``default_config`` returns a fresh config every call (config dataclasses are frozen; callers derive
variants with ``dataclasses.replace``).

This module is the task table and its lookup. Each built-in task's tuned defaults come from the
table in ``envs/tuned.py`` (by task name), and what makes a Gymnasium env a task (``gym:<Id>``,
``register_task(gym=...)``) from ``envs/gym_tasks.py``.

Tasks of the user's own code (``register_task``) exist in the process that registered them; ranks
that torchrun starts from the command line get them through ``distrl train --import MODULE``,
which imports the registering module in every rank before the task is resolved.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from distrl.config import TrainConfig
from distrl.envs import league
from distrl.envs.acrobot import Acrobot
from distrl.envs.cartpole import CartPole, CartPoleNoVelocity
from distrl.envs.core import VecEnv
from distrl.envs.episodic import EpisodicSuite, EpisodicVecEnv
from distrl.envs.gym_tasks import GYM_PREFIX, id_parts, is_gym_id, task_parts
from distrl.envs.pendulum import Pendulum
from distrl.envs.pettingzoo_env import AgentReturns
from distrl.envs.tuned import TUNED
from distrl.hooks import Hooks
from distrl.install import pip_install


@dataclass(frozen=True)
class Task:
    """A trainable task: ``make_env(num_envs, device, max_episode_steps)`` and its defaults."""

    name: str
    description: str
    make_env: Callable[..., VecEnv]
    """``make_env(num_envs, device, max_episode_steps)``; a Gymnasium task's also takes
    ``vectorization`` (--env.vectorization: "sync" or "async")."""
    default_config: Callable[[], TrainConfig]
    suite: EpisodicSuite | None = None
    """Set for multi-task episodic suites: ``distrl train`` then runs the episodic RLOO runner
    (``runner/episodic.py``) on the suite; ``make_env`` is a mixed-task env for ``play``."""
    preflight: Callable[[], None] | None = None
    """Raises ValueError naming the fix when the task cannot be built here (a missing extra, a
    Gymnasium space distrl cannot step); ``distrl train`` runs it before anything starts."""
    held_out_suite: EpisodicSuite | None = None
    """The suite whose held-out init states ``distrl play`` scores a policy of this PPO task on
    (``metaworld-mt10-ppo``: MT10's, as the episodic runs are scored)."""
    hooks: tuple[Hooks, ...] = ()
    """Callbacks every run of this task calls (``distrl.hooks.Hooks``), before those
    passed to ``distrl.train``; set by ``register_task(..., hooks=)``."""
    gymnasium: bool = False
    """Steps Gymnasium envs: ``make_env`` takes --env.vectorization."""
    pooled: bool = False
    """Steps host envs that a subprocess pool can step (Meta-World): ``make_env`` takes
    --env.vectorization and --env.num-workers."""
    check: Callable[[TrainConfig], None] | None = None
    """Raises ValueError naming the fix for a config this task cannot train (a VectorEnv
    instance's fixed env count); ``distrl train`` runs it before anything starts."""

    @property
    def evaluation_suite(self) -> EpisodicSuite | None:
        """The suite ``distrl play`` reports per-task success on: ``suite`` or
        ``held_out_suite`` (None: mean return over episodes)."""
        return self.suite or self.held_out_suite


MUJOCO_HINT = f"make setup-mujoco, or {pip_install('mujoco')}"


def mujoco_installed() -> bool:
    """Whether the mujoco package can be imported (without importing it: that takes ~0.3 s)."""
    import importlib.util

    return importlib.util.find_spec("mujoco") is not None


def _require_mujoco(task: str) -> Callable[[], None]:
    def check() -> None:
        if not mujoco_installed():
            raise ValueError(
                f"task {task} needs the mujoco extra, which is not installed: {MUJOCO_HINT}"
            )

    return check


def _mujoco(cls_name: str) -> Callable[[int, torch.device, int | None], VecEnv]:
    """Factory of a batched MuJoCo env from ``distrl.envs.mujoco`` (imported only when built)."""

    def make(num_envs: int, device: torch.device, max_episode_steps: int | None = None) -> VecEnv:
        try:
            from distrl.envs import mujoco
        except ModuleNotFoundError as e:
            if e.name != "mujoco":
                raise
            raise ImportError(f"the MuJoCo tasks need the mujoco extra: {MUJOCO_HINT}") from e
        return getattr(mujoco, cls_name)(num_envs, device, max_episode_steps)

    return make


def _require_envpool(task: str) -> Callable[[], None]:
    def check() -> None:
        from distrl.envs.envpool_atari import INSTALL_HINT, envpool_installed

        if not envpool_installed():
            raise ValueError(f"task {task} needs the envpool extra, which is not installed: "
                             f"{INSTALL_HINT}")  # fmt: skip

    return check


def _atari(game: str) -> Callable[[int, torch.device, int | None], VecEnv]:
    """Factory of an EnvPool Atari env (``distrl.envs.envpool_atari``, imported when built)."""

    def make(num_envs: int, device: torch.device, max_episode_steps: int | None = None) -> VecEnv:
        from distrl.envs.envpool_atari import EnvPoolAtari

        return EnvPoolAtari(game, num_envs, device, max_episode_steps)

    return make


def _pettingzoo(
    factory: Callable[[], Any], agent_id: bool, groups: Callable[[str], str] | None = None
) -> Callable[..., VecEnv]:
    def make(num_envs: int, device: torch.device, max_episode_steps: int | None = None) -> VecEnv:
        from distrl.envs.pettingzoo_env import ParallelVecEnv

        return ParallelVecEnv(
            factory, num_envs, device, max_episode_steps, agent_id=agent_id, groups=groups
        )

    return make


def _group_table(name: str, table: dict[str, str]) -> Callable[[str], str]:
    """``groups=`` given as a dict: every agent must be in it (refused when the env is built)."""

    def group(agent: str) -> str:
        if agent not in table:
            raise ValueError(
                f"task {name!r}: agent {agent!r} is not in the groups= given to register_task "
                f"(it names {sorted(table)})"
            )
        return table[agent]

    return group


def _mpe(name: str) -> tuple[Callable[..., VecEnv], Callable[[], None]]:
    """Task ``mpe-<name>``'s env factory (``pettingzoo_env.mpe``) and the preflight that names
    the extra to install when MPE2 is missing."""

    def make(num_envs: int, device: torch.device, max_episode_steps: int | None = None
             ) -> VecEnv:  # fmt: skip
        from distrl.envs.pettingzoo_env import mpe

        return mpe(name, num_envs, device, max_episode_steps)

    def preflight() -> None:
        import importlib.util

        if importlib.util.find_spec("mpe2") is None:
            from distrl.envs.pettingzoo_env import HINT

            raise ValueError(f"task mpe-{name} needs MPE2, which is not installed: {HINT}")

    return make, preflight


_BUILTINS: dict[str, Task] = {
    t.name: t
    for t in (
        Task(
            name="cartpole",
            description="CartPole-v1 balance (discrete 2), batched torch; max return 500",
            make_env=CartPole,
            default_config=TUNED["cartpole"],
        ),
        Task(
            name="acrobot",
            description="Acrobot-v1 swing-up (discrete 3), batched torch; return -500..~-60",
            make_env=Acrobot,
            default_config=TUNED["acrobot"],
        ),
        Task(
            name="pendulum",
            description="Pendulum-v1 swing-up (continuous 1-D torque), batched torch; "
            "return ~-1400..~-150",
            make_env=Pendulum,
            default_config=TUNED["pendulum"],
        ),
        Task(
            name="connect-four",
            description="Connect Four by self-play against a league of the learner's past "
            "versions (discrete 7, illegal moves masked), batched torch; win rates against "
            "random and a scripted player in the records",
            make_env=league.make_env,
            default_config=TUNED["connect-four"],
            hooks=(league.SelfPlay(),),
        ),
        Task(
            name="mpe-spread",
            description="MPE's simple_spread through PettingZoo: 3 agents cover 3 landmarks "
            "(discrete 5 each), every agent a row, one shared policy; needs the multiagent extra",
            make_env=_mpe("spread")[0],
            default_config=TUNED["mpe-spread"],
            preflight=_mpe("spread")[1],
            hooks=(AgentReturns(),),
        ),
        Task(
            name="mpe-speaker-listener",
            description="MPE's simple_speaker_listener through PettingZoo: a speaker (3 "
            "actions) guides a listener (5) to a landmark, a policy per agent group; needs the "
            "multiagent extra",
            make_env=_mpe("speaker-listener")[0],
            default_config=TUNED["mpe-speaker-listener"],
            preflight=_mpe("speaker-listener")[1],
            hooks=(AgentReturns(),),
        ),
        Task(
            name="cartpole-novel",
            description="CartPole-v1 with the velocities hidden (obs x, theta): needs memory; "
            "recurrent LSTM policy",
            make_env=CartPoleNoVelocity,
            default_config=TUNED["cartpole-novel"],
        ),
        Task(
            name="atari-breakout",
            description="Atari Breakout through EnvPool (CleanRL's preprocessing: 84x84 gray, "
            "4 frames, episodic life, clipped rewards), nature-cnn; needs the envpool extra",
            make_env=_atari("Breakout-v5"),
            default_config=TUNED["atari-breakout"],
            preflight=_require_envpool("atari-breakout"),
        ),
        Task(
            name="atari-pong",
            description="Atari Pong through EnvPool (CleanRL's preprocessing), nature-cnn; "
            "return -21..21; needs the envpool extra",
            make_env=_atari("Pong-v5"),
            default_config=TUNED["atari-pong"],
            preflight=_require_envpool("atari-pong"),
        ),
        Task(
            name="halfcheetah",
            description="HalfCheetah-v5 run (continuous 6-D), batched MuJoCo; needs the mujoco "
            "extra",
            make_env=_mujoco("HalfCheetah"),
            default_config=TUNED["halfcheetah"],
            preflight=_require_mujoco("halfcheetah"),
        ),
        Task(
            name="hopper",
            description="Hopper-v5 hop (continuous 3-D), batched MuJoCo; needs the mujoco extra",
            make_env=_mujoco("Hopper"),
            default_config=TUNED["hopper"],
            preflight=_require_mujoco("hopper"),
        ),
        Task(
            name="walker2d",
            description="Walker2d-v5 walk (continuous 6-D), batched MuJoCo; needs the mujoco extra",
            make_env=_mujoco("Walker2d"),
            default_config=TUNED["walker2d"],
            preflight=_require_mujoco("walker2d"),
        ),
        Task(
            name="ant",
            description="Ant-v5 walk (continuous 8-D), batched MuJoCo; needs the mujoco extra",
            make_env=_mujoco("Ant"),
            default_config=TUNED["ant"],
            preflight=_require_mujoco("ant"),
        ),
    )
}


def _reach_task_env(
    name: str,
    num_envs: int,
    device: torch.device,
    max_episode_steps: int | None = None,
    held_out: bool = False,
) -> EpisodicVecEnv:
    from distrl.envs.reach import Reach

    return Reach(num_envs, device, max_episode_steps, task=name, held_out=held_out)


def _reach_mixed_env(
    num_envs: int, device: torch.device, max_episode_steps: int | None = None
) -> VecEnv:
    from distrl.envs.reach import REACH_TASKS, Reach

    return Reach(
        num_envs, device, max_episode_steps, task=[i % len(REACH_TASKS) for i in range(num_envs)]
    )


def _mt10_task_env(
    name: str,
    num_envs: int,
    device: torch.device,
    max_episode_steps: int | None = None,
    held_out: bool = False,
    **how: Any,
) -> EpisodicVecEnv:
    """``how``: vectorization, num_workers (``meta_world.make_mt10``)."""
    from distrl.envs.meta_world import make_mt10

    return make_mt10(name, num_envs, device, max_episode_steps, held_out=held_out, **how)


def _mt10_mixed_env(
    num_envs: int, device: torch.device, max_episode_steps: int | None = None, **how: Any
) -> VecEnv:
    """Every MT10 task in one batch for PPO (row i runs task i mod 10), Meta-World's dense
    reward, episodes that go on after success (``MetaWorldMT10``, ``reward="dense"``)."""
    from distrl.envs.meta_world import MT10_TASKS, make_mt10

    tasks = [MT10_TASKS[i % len(MT10_TASKS)] for i in range(num_envs)]
    return make_mt10(tasks, num_envs, device, max_episode_steps, reward="dense", **how)


def _mt10_first_env(
    num_envs: int, device: torch.device, max_episode_steps: int | None = None, **how: Any
) -> VecEnv:
    from distrl.envs.meta_world import MT10_TASKS

    return _mt10_task_env(MT10_TASKS[0], num_envs, device, max_episode_steps, **how)


def _reach_names() -> tuple[str, ...]:
    from distrl.envs.reach import TASK_NAMES

    return TASK_NAMES


def _mt10_names() -> tuple[str, ...]:
    from distrl.envs.meta_world import MT10_TASKS  # imports metaworld lazily, not here

    return MT10_TASKS


_EPISODIC: dict[str, Task] = {
    "reach10": Task(
        name="reach10",
        description="Reach10 multi-task suite (10 point-mass reaching tasks, binary success, "
        "shipped init states); episodic RLOO, tasks sharded over ranks",
        make_env=_reach_mixed_env,
        default_config=TUNED["reach10"],
        suite=EpisodicSuite(_reach_names(), _reach_task_env),
    ),
    "metaworld-mt10": Task(
        name="metaworld-mt10",
        description="Meta-World MT10 (needs the metaworld extra); episodic RLOO, 50 goal variants "
        "per task as init states",
        make_env=_mt10_first_env,
        default_config=TUNED["metaworld-mt10"],
        suite=EpisodicSuite(_mt10_names(), _mt10_task_env, pooled=True),
        pooled=True,
    ),
}


def _require_metaworld() -> None:
    import importlib.util

    if importlib.util.find_spec("metaworld") is None:
        from distrl.envs.meta_world import INSTALL_HINT

        raise ValueError(f"the Meta-World tasks need the metaworld package: {INSTALL_HINT}")


_METAWORLD_PPO = Task(
    name="metaworld-mt10-ppo",
    description="Meta-World MT10 from scratch with multi-task PPO (needs the metaworld extra): "
    "all ten tasks in every rank's batch, dense reward, task one-hot, PopArt per task; "
    "play scores it on MT10's held-out goals",
    make_env=_mt10_mixed_env,
    default_config=TUNED["metaworld-mt10-ppo"],
    preflight=_require_metaworld,
    held_out_suite=EpisodicSuite(_mt10_names(), _mt10_task_env),
    pooled=True,
)
_BUILTINS[_METAWORLD_PPO.name] = _METAWORLD_PPO


# MinAtar (Young & Tian 2019): task name -> (the reference's game name, what the agent does)
_MINATAR = {
    "minatar-asterix": ("asterix", "Asterix: collect gold, dodge enemies (discrete 5)"),
    "minatar-breakout": ("breakout", "Breakout: bounce the ball into the bricks (discrete 3)"),
    "minatar-freeway": ("freeway", "Freeway: cross the road, 2501-step episodes (discrete 3)"),
    "minatar-seaquest": ("seaquest", "Seaquest: shoot, rescue divers, surface (discrete 6)"),
    "minatar-space-invaders": ("space_invaders", "Space Invaders: shoot the aliens (discrete 4)"),
}


def _minatar(game: str) -> Callable[[int, torch.device, int | None], VecEnv]:
    def make(num_envs: int, device: torch.device, max_episode_steps: int | None = None) -> VecEnv:
        from distrl.envs.minatar import GAMES

        return GAMES[game](num_envs, device, max_episode_steps)

    return make


for _name, (_game, _what) in _MINATAR.items():
    _BUILTINS[_name] = Task(
        name=_name,
        description=f"MinAtar {_what}, 10x10 grid observations, sticky actions; batched torch, "
        f"step for step the minatar package",
        make_env=_minatar(_game),
        default_config=TUNED[_name],
    )


_GYM_EXAMPLES: dict[str, str] = {
    "CartPole-v1": "Gymnasium CartPole-v1 (discrete), stepped through the Gymnasium adapter",
    "Acrobot-v1": "Gymnasium Acrobot-v1 (discrete), stepped through the Gymnasium adapter",
    "Pendulum-v1": "Gymnasium Pendulum-v1 (continuous), stepped through the Gymnasium adapter",
    "HalfCheetah-v5": "Gymnasium MuJoCo HalfCheetah-v5 (continuous); needs the mujoco extra",
}


def _gym_task(name: str, description: str | None = None) -> Task:
    from distrl.envs.gym import resolve_env_id  # imports Gymnasium only when a gym task is used

    env_id = name[len(GYM_PREFIX) :]
    resolve_env_id(env_id)  # fail now, with close matches, rather than when the env is built
    return Task(
        name=name,
        description=description or f"Gymnasium {env_id} through the Gymnasium adapter",
        **id_parts(name, env_id),
    )


# Tasks registered by the user's own code (``register_task``), in this process.
_USER: dict[str, Task] = {}


def register_task(
    name: str,
    make_env: Callable[[int, torch.device, int | None], VecEnv] | None = None,
    *,
    gym: Any = None,
    pettingzoo: Callable[[], Any] | None = None,
    agent_id: bool = False,
    groups: Callable[[str], str] | dict[str, str] | None = None,
    default_config: TrainConfig | None = None,
    description: str = "",
    max_episode_steps: int | None = None,
    hooks: Sequence[Hooks] = (),
    replace: bool = False,
) -> Task:
    """Make ``name`` a task of this process: ``distrl.train``/``make_config`` then accept it.

    Give exactly one of:
      make_env: ``make_env(num_envs, device, max_episode_steps) -> VecEnv``, a batched torch env
          (the contract is in ``distrl.envs.core``; ``distrl.check_env`` tests one);
      gym: a Gymnasium env (the spaces ``distrl.envs.gym`` lists), as one of
          - a registered id (``"CartPole-v1"``, as task ``gym:CartPole-v1``),
          - a factory of one env (``gym() -> gymnasium.Env``),
          - an env instance made by ``gymnasium.make``: copies are made from its ``env.spec``,
          - a ``gymnasium.vector.VectorEnv`` instance, stepped as it is (``VectorEnvInstance``):
            its ``num_envs``, no other --env.num-envs;
          distrl steps ``num_envs`` copies of the first three in a SyncVectorEnv, or an
          AsyncVectorEnv with --env.vectorization async;
      pettingzoo: a factory of one PettingZoo ``ParallelEnv``: every agent of ``num_envs``
          copies is a row (``distrl.envs.pettingzoo_env``; ``agent_id`` appends each agent's
          one-hot index to its observation), each agent's return in the records
          (``agent/<name>/return``). ``groups`` maps an agent's name to its group's (a dict or
          a function; default: the name without a trailing ``_<number>``): one policy acts for
          all groups, or one per group with ``--policy.mapping per-group``.
    ``default_config`` is the task's starting config (its ``task`` is set to ``name``); without
    one a torch env starts from TrainConfig's defaults and a Gymnasium one from 8 envs x 128
    steps, as for ``gym:<Id>``. ``max_episode_steps`` is the Gymnasium env's time limit.
    ``hooks`` (``distrl.Hooks`` instances) are called by every run of the task in this process.
    A torchrun-started script registers in every rank, as every rank runs it; for ``distrl
    train``, name the registering module on the command line: ``distrl train --import MODULE
    NAME`` imports it in the launcher and in every rank.
    """
    if not isinstance(name, str) or not name or name.startswith(GYM_PREFIX):
        raise ValueError(
            f"a task name must be a non-empty string not starting with {GYM_PREFIX!r}, got {name!r}"
        )
    if name in _BUILTINS or name in _EPISODIC:
        raise ValueError(f"task {name!r} is built in; register yours under another name")
    if name in _USER and not replace:
        raise ValueError(f"task {name!r} is already registered; pass replace=True to replace it")
    if sum(x is not None for x in (make_env, gym, pettingzoo)) != 1:
        raise ValueError(
            f"register_task({name!r}): give exactly one of make_env= (a batched torch VecEnv "
            f"factory), gym= (a Gymnasium env: its id, a factory, an instance or a VectorEnv) "
            f"or pettingzoo= (a factory of a PettingZoo ParallelEnv)"
        )
    if pettingzoo is not None:
        if not callable(pettingzoo):
            raise ValueError(f"register_task({name!r}): pettingzoo= must be a factory of one env")
        if isinstance(groups, dict):
            groups = _group_table(name, groups)
        if groups is not None and not callable(groups):
            raise ValueError(f"register_task({name!r}): groups= must be a dict or a function")
        make_env = _pettingzoo(pettingzoo, agent_id, groups)
        hooks = (*hooks, AgentReturns())
    if make_env is not None and not callable(make_env):
        raise ValueError(f"register_task({name!r}): the env factory {make_env!r} is not callable")
    if default_config is not None and not isinstance(default_config, TrainConfig):
        raise ValueError(
            f"register_task({name!r}): default_config must be a TrainConfig (e.g. from "
            f"distrl.make_config), got {type(default_config).__name__}"
        )
    hooks = tuple(hooks)
    if not all(isinstance(h, Hooks) for h in hooks):
        raise ValueError(f"register_task({name!r}): hooks must be distrl.Hooks instances")
    parts: dict[str, Any] = {
        "make_env": make_env,
        "default_config": lambda: TrainConfig(task=name),
        "description": f"registered by {getattr(make_env, '__module__', '?')}",
    }
    if gym is not None:
        parts = task_parts(name, gym, max_episode_steps)
        # the env's network (images, Dicts) is found by building one env, once, when the
        # config is first asked for rather than at registration
        parts["default_config"] = functools.cache(parts["default_config"])
    if default_config is not None:
        cfg = dataclasses.replace(default_config, task=name)
        parts["default_config"] = lambda: cfg  # frozen: sharing one instance is safe
    if description:
        parts["description"] = description
    task = Task(name=name, hooks=hooks, **parts)
    _USER[name] = task
    return task


def is_user_task(name: str) -> bool:
    """Whether ``name`` was registered by ``register_task`` in this process."""
    return name in _USER


def list_tasks() -> list[Task]:
    """The built-in tasks, the ones registered in this process, then example ``gym:`` tasks
    (any registered Gymnasium id works)."""
    gym_tasks = [_gym_task(GYM_PREFIX + i, d) for i, d in _GYM_EXAMPLES.items()]
    return [*_BUILTINS.values(), *_EPISODIC.values(), *_USER.values(), *gym_tasks]


IMPORT_ENV_VAR = "DISTRL_IMPORT"
"""Comma-separated modules that a task read from a file may import (``check_task_from_file``)."""


def gym_module(task: object) -> str | None:
    """The module a ``gym:<module>:<Id>`` task imports; None for any other task."""
    if isinstance(task, str) and task.startswith(GYM_PREFIX) and ":" in task[len(GYM_PREFIX) :]:
        return task[len(GYM_PREFIX) :].split(":", 1)[0]
    return None


def check_task_from_file(task: object, source: str) -> None:
    """Refuse a task read from a file (a run's config.yaml, a checkpoint's manifest) that would
    import a module: ``gym:<module>:<Id>`` passes only when ``module`` is imported already (the
    command line named the task, or the caller's code imported it) or listed in
    ``DISTRL_IMPORT``. Module imports come from the command line or code, never from a file."""
    module = gym_module(task)
    if module is None or module in sys.modules:
        return
    allowed = {m.strip() for m in os.environ.get(IMPORT_ENV_VAR, "").split(",")}
    if module in allowed:
        return
    raise ValueError(
        f"{source} names task {task!r}, which would import the Python module {module!r}; a file "
        f"never makes distrl import code. Name the module yourself: the task on the command "
        f"line (distrl train {task} ...), {IMPORT_ENV_VAR}={module} before the command (e.g. "
        f"{IMPORT_ENV_VAR}={module} distrl play ...), or `import {module}` in your code first"
    )


def get_task(name: str) -> Task:
    """The task called ``name``; ``gym:<Id>`` for any registered Gymnasium environment."""
    if name in _BUILTINS:
        return _BUILTINS[name]
    if name in _USER:
        return _USER[name]
    if name in _EPISODIC:
        if name == "metaworld-mt10":
            _require_metaworld()
        return _EPISODIC[name]
    if name.startswith(GYM_PREFIX):
        return _gym_task(name, _GYM_EXAMPLES.get(name[len(GYM_PREFIX) :]))
    if is_gym_id(name):  # "CartPole-v1": task gym:CartPole-v1
        return get_task(GYM_PREFIX + name)
    known = [*_BUILTINS, *_EPISODIC, *_USER, *(GYM_PREFIX + i for i in _GYM_EXAMPLES)]
    by_lower = {k.lower(): k for k in known}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=3, cutoff=0.4)
    hint = f" Did you mean {', '.join(by_lower[c] for c in close)}?" if close else ""
    raise ValueError(
        f"unknown task {name!r}.{hint} Run `distrl list` for every task, or use gym:<Id> for a "
        f"Gymnasium environment; a task your own module registers needs `--import MODULE` "
        f"(train, play and export take it)."
    )


AUTO_PREFIX = "env:"
"""Tasks ``task_name`` registers for the env objects given to ``distrl.train``."""


def task_name(env: Any) -> str:
    """The task ``distrl.train``/``make_config`` train for ``env``: a task name (or a registered
    Gymnasium id, e.g. "CartPole-v1") as it is; an env that ``gymnasium.make(id)`` made, with
    nothing changed: ``gym:<id>``; any other ``register_task(gym=)`` takes (an env instance,
    a ``gymnasium.vector.VectorEnv``, a factory of one env): registered as task ``env:<what>``,
    replacing the one registered before under that name."""
    if isinstance(env, str):
        return env
    import gymnasium

    from distrl.envs.gym import instance_spec, registered_id

    if isinstance(env, gymnasium.Env):
        spec = instance_spec(env)
        plain = registered_id(spec)
        if plain is not None:
            return GYM_PREFIX + plain
        what = spec.id
    elif isinstance(env, gymnasium.vector.VectorEnv):
        vector_spec = getattr(env, "spec", None)
        what = vector_spec.id if vector_spec is not None else type(env.unwrapped).__name__
    elif callable(env):
        what = getattr(env, "__name__", type(env).__name__).strip("<>")
        if what == "lambda":  # an anonymous factory: named by the env it makes (its id)
            probe = env()
            made = getattr(probe, "spec", None)
            what = (
                made.id if made is not None else type(getattr(probe, "unwrapped", probe)).__name__
            )
            probe.close()
    else:
        raise ValueError(
            f"distrl.train takes a TrainConfig, a task name, a Gymnasium id (e.g. "
            f"'CartPole-v1'), a gymnasium.Env, a gymnasium.vector.VectorEnv or a factory of one "
            f"env; got an object of type {type(env).__name__}"
        )
    name = AUTO_PREFIX + what
    register_task(name, gym=env, replace=True)
    return name


def check_config(cfg: TrainConfig) -> None:
    """Refuse a config that task ``cfg.task`` cannot train, naming the fix (``Task.check``;
    --env.vectorization async on a task that steps neither Gymnasium nor Meta-World envs)."""
    task = get_task(cfg.task)
    if cfg.env.vectorization != "sync" and not (task.gymnasium or task.pooled):
        raise ValueError(
            f"--env.vectorization {cfg.env.vectorization} runs Gymnasium or Meta-World envs in "
            f"subprocesses, and task {cfg.task!r} steps batched torch envs itself; leave it at "
            f"sync (a Gymnasium task takes it: gym:<Id>, register_task(name, gym=...); so do "
            f"metaworld-mt10 and metaworld-mt10-ppo)"
        )
    if task.check is not None:
        task.check(cfg)


def default_config(name: str) -> TrainConfig:
    """A fresh default TrainConfig for task ``name`` (with ``task`` set)."""
    return get_task(name).default_config()


def make_env(cfg: TrainConfig, device: torch.device | str) -> VecEnv:
    """Build ``cfg.task``'s VecEnv with ``cfg.env.num_envs`` envs on ``device``."""
    task = get_task(cfg.task)
    args = (cfg.env.num_envs, torch.device(device), cfg.env.max_episode_steps)
    if task.gymnasium:
        return task.make_env(*args, vectorization=cfg.env.vectorization)
    if task.pooled:
        return task.make_env(
            *args, vectorization=cfg.env.vectorization, num_workers=cfg.env.num_workers
        )
    return task.make_env(*args)
