"""Algorithm -> runner: the second plug-in axis, beside ``distributed/strategies.STRATEGIES``.

An algorithm is a ``runner/base.Runner`` subclass plus one ``ALGORITHMS`` line saying which
tasks it trains (``claims``; the last registered algorithm that claims a task trains it), what
its runner is built on (a VecEnv of the task, or the task's episodic suite), the options only it
reads (set on another algorithm's task they are refused, each with its own message), what it
needs from a strategy (capabilities of ``strategies.CAPABILITIES``, some only while one of its
options is set) and whether it corrects rollouts of older weights (``StrategySpec.off_policy``).
``tests/runner/example_algorithm.py`` adds one that way.

These two tables hold every rule of which option, algorithm and strategy go together:
``check_compatible`` checks a config against both (before torchrun starts, and in each rank
before its runner is built), and ``compatibility_matrix`` prints them for docs/architecture.md.
This module reads the strategy table; ``distributed/`` never imports it.
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from distrl.config import DistConfig, MultiTaskConfig, OffPolicyConfig, TrainConfig
from distrl.distributed.base import Strategy
from distrl.distributed.strategies import (
    AGREED_STATS,
    SMALL_RANK_STATE,
    STATS_WHERE_WEIGHTS,
    STRATEGIES,
    WHOLE_EPISODES,
    WHOLE_LEARNER,
    StrategySpec,
    check_strategy,
)
from distrl.envs.core import VecEnv
from distrl.envs.registry import Task, get_task
from distrl.runner import off_policy_defaults
from distrl.runner.base import Runner
from distrl.runner.episodic import EpisodicRunner
from distrl.runner.hooks import Hooks
from distrl.runner.off_policy import OffPolicyRunner, check_off_policy_env
from distrl.runner.on_policy import OnPolicyRunner
from distrl.telemetry import Telemetry

SUITES = "the episodic suites (reach10, metaworld-mt10)"


@dataclass(frozen=True)
class Option:
    """A config field only the algorithms listing it read."""

    name: str
    """Dotted below the config: ``policy.popart_tasks``."""
    refusal: str = "{flag} applies to {tasks}, not to {task}; drop it"
    """What a run of another algorithm says when the option is set (differs from its default):
    a format string of ``flag``, ``task``, ``algorithm`` (the run's) and ``tasks`` (the tasks of
    the algorithms that read it)."""

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


@dataclass(frozen=True)
class Need:
    """A capability the algorithm needs from a strategy (``strategies.CAPABILITIES``)."""

    capability: str
    option: str | None = None
    """Needed only while this option (dotted, as ``Option.name``) is set; None: always."""
    refusal: str = (
        "{task} trains with {algorithm}, which --dist.strategy {strategy} cannot run: {why}"
    )
    """The refusal under a strategy that lacks it: a format string of ``task``, ``algorithm``,
    ``strategy``, ``why`` (the strategy's reason) and ``givers`` (the strategies that would do)."""


@dataclass(frozen=True)
class AlgorithmSpec:
    name: str
    """What messages and the docs call it: ``on-policy PPO``."""
    runner: Callable[..., Runner]
    """The runner class: ``runner(cfg, strategy, env, telemetry, run_dir, hooks=)``, or with
    ``on_suite`` ``runner(cfg, strategy, suite, device, telemetry, run_dir, hooks=)``."""
    claims: Callable[[Task], bool]
    """Whether it trains this task."""
    tasks: str
    """Its tasks, in words (messages and the docs)."""
    on_suite: bool = False
    """Built on the task's episodic suite, not on a VecEnv of the task."""
    options: tuple[Option, ...] = ()
    ignores: tuple[str, ...] = ()
    """Fields (dotted, as ``Option.name``) it never reads that are no other algorithm's option
    either: accepted when set, without effect. ``train <task> --help`` leaves them out, with the
    other algorithms' options (``unread_options``)."""
    needs: tuple[Need, ...] = ()
    corrects_off_policy: bool = False
    """Learns from rollouts of older weights (PPO: V-trace), as async learner-actor gives."""
    by_default: bool = True
    """Trains the tasks it claims without --algorithm (False: only when named)."""
    defaults: Callable[[TrainConfig], TrainConfig] | None = None
    """Its defaults, applied to the task's before the user's flags (``with_defaults``)."""
    check_env: Callable[[TrainConfig, VecEnv], None] | None = None
    """Refuses a task whose env it cannot train (its actions), before ``--nproc`` starts ranks
    (one env of the task, on the CPU) and again in its runner."""

    def build(
        self,
        cfg: TrainConfig,
        strategy: Strategy,
        task: Task,
        env: VecEnv | None,
        device: torch.device,
        telemetry: Telemetry | None,
        run_dir: Path | None,
        hooks: Sequence[Hooks] = (),
    ) -> Runner:
        """This algorithm's runner for ``task`` (``env``: the VecEnv, unless ``on_suite``),
        calling ``hooks``."""
        if self.on_suite:
            assert task.suite is not None
            return self.runner(
                cfg, strategy, task.suite, device, telemetry, run_dir, hooks=list(hooks)
            )
        assert env is not None
        return self.runner(cfg, strategy, env, telemetry, run_dir, hooks=list(hooks))


_PPO_OPTIONS = (
    Option(
        "agent.total_timesteps",
        "{flag} does not apply to {task}: its {algorithm} runner collects whole episodes of "
        "varying length; use --agent.max-iterations",
    ),
    Option(
        "agent.target_return",
        "{flag} does not apply to {task}: its {algorithm} runner scores success over its "
        "suite; use --multitask.early-stop-success",
    ),
    Option(
        "policy.reward_normalization",
        "{flag} does not apply to {task}: its {algorithm} runner scores whole episodes; leave "
        "it off",
    ),
    Option(
        "policy.popart_tasks",
        "{flag} does not apply to {task}: its {algorithm} runner has no critic (RLOO's baseline "
        "is the group's other episodes); leave it at 0",
    ),
    Option(
        "policy.recurrent",
        "{flag} does not apply to {task}: its {algorithm} runner scores whole episodes of "
        "memoryless policies; leave it at none (recurrent policies train with PPO: {tasks})",
    ),
    Option(
        "dist.preempt_fraction",
        "{flag} ends the fixed-length PPO rollouts of straggling ranks early (DD-PPO), and "
        "{task} trains with {algorithm}, which collects no such rollout; drop it",
    ),
)
_GRAD_ACCUM = Option("agent.grad_accum")
"""ppo's and rloo's: the off-policy learners take one minibatch per step (and PQN its own)."""
_SUITE_OPTIONS = tuple(
    Option(
        f"multitask.{f.name}",
        "{flag} applies to {tasks}, not to {task}; drop it, or train a suite: distrl train "
        "reach10 --multitask.tasks ..."
        if f.name == "tasks"
        else Option.refusal,
    )
    for f in dataclasses.fields(MultiTaskConfig)
)

ALGORITHMS: dict[str, AlgorithmSpec] = {
    "ppo": AlgorithmSpec(
        "on-policy PPO",
        OnPolicyRunner,
        lambda task: task.suite is None,
        "the tasks without an episodic suite",
        options=(*_PPO_OPTIONS, _GRAD_ACCUM),
        needs=(
            Need(
                STATS_WHERE_WEIGHTS,
                "policy.popart_tasks",
                "{task} trains with {algorithm} with PopArt, which --dist.strategy {strategy} "
                "cannot run: {why}",
            ),
        ),
        corrects_off_policy=True,
    ),
    "rloo": AlgorithmSpec(
        "episodic RLOO",
        EpisodicRunner,
        lambda task: task.suite is not None,
        SUITES,
        on_suite=True,
        options=(*_SUITE_OPTIONS, _GRAD_ACCUM),
        # no critic, no bootstrapping: RLOO's loss has no value term and its advantages are
        # the group's leave-one-out returns (algorithms/rloo.py); no recurrent core either
        ignores=(
            "agent.gamma",
            "agent.gae_lambda",
            "agent.clip_vloss",
            "agent.vf_coef",
            "agent.norm_adv",
            "policy.recurrent_hidden",
        ),
        needs=(
            Need(WHOLE_EPISODES),
            Need(
                AGREED_STATS,
                "multitask.skip_solved",
                "--multitask.skip-solved needs every rank to agree on the tasks' success, which "
                "--dist.strategy {strategy} does not give its workers; use {givers}, or drop it",
            ),
        ),
    ),
}


_OFF_POLICY_IGNORES = (
    "agent.gae_lambda",
    "agent.clip_coef",
    "agent.clip_vloss",
    "agent.vf_coef",
    "agent.ent_coef",
    "agent.norm_adv",
    "agent.desired_kl",
    "agent.target_kl",
    "policy.init_log_std",
    "policy.recurrent_hidden",
)
_ALL_OFF = {f.name for f in dataclasses.fields(OffPolicyConfig)}
_READS = {
    "dqn": _ALL_OFF
    - {
        "q_lambda",
        "alpha",
        "target_entropy",
        "exploration_noise",
        "policy_noise",
        "noise_clip",
        "policy_delay",
    },
    "pqn": {"eps_start", "eps_end", "eps_fraction", "q_lambda"},
    "sac": _ALL_OFF
    - {
        "actor_epsilon",
        "eps_start",
        "eps_end",
        "eps_fraction",
        "q_lambda",
        "exploration_noise",
        "policy_noise",
        "noise_clip",
        "policy_delay",
    },
    "td3": _ALL_OFF
    - {
        "actor_epsilon",
        *("eps_start", "eps_end", "eps_fraction", "q_lambda", "alpha", "target_entropy"),
    },
}
_OFF_POLICY_OPTIONS = {
    name: Option(
        f"offpolicy.{name}",
        "{flag} applies to --algorithm "
        + ", ".join(a for a in _READS if name in _READS[a])
        + ", not to {algorithm}; drop it",
    )
    for name in sorted(_ALL_OFF)
}
_HEAD = Option(
    "policy.head",
    "{flag} is set by --algorithm sac (squashed-gaussian) and td3 (tanh); {algorithm} trains "
    "the default head; drop it",
)
_RUN_TO = (_PPO_OPTIONS[0], _PPO_OPTIONS[1])  # --agent.total-timesteps, --agent.target-return


def _off_policy(name: str, words: str, tasks: str, *, replay: bool) -> AlgorithmSpec:
    options = tuple(_OFF_POLICY_OPTIONS[f] for f in sorted(_READS[name]))
    ignores: tuple[str, ...] = _OFF_POLICY_IGNORES
    if name != "pqn":
        ignores += ("agent.num_epochs", "agent.num_minibatches")
    return AlgorithmSpec(
        words,
        OffPolicyRunner,
        lambda task: task.suite is None,
        tasks,
        options=(*_RUN_TO, *options, *((_HEAD,) if name in ("sac", "td3") else ())),
        ignores=ignores,
        needs=(
            Need(WHOLE_LEARNER),
            *((Need(SMALL_RANK_STATE),) if replay else ()),
        ),
        # a replay learns from transitions of older weights by design: Ape-X's actors may run
        # ahead of their learner (--dist.sync async)
        corrects_off_policy=replay,
        by_default=False,
        defaults=off_policy_defaults.DEFAULTS[name],
        check_env=check_off_policy_env,
    )


ALGORITHMS |= {
    "pqn": _off_policy("pqn", "PQN", "discrete-action tasks", replay=False),
    "dqn": _off_policy("dqn", "DQN", "discrete-action tasks", replay=True),
    "sac": _off_policy("sac", "SAC", "continuous-action tasks", replay=True),
    "td3": _off_policy("td3", "TD3", "continuous-action tasks", replay=True),
}


def algorithm_for(task: Task, name: str | None = None) -> AlgorithmSpec:
    """The algorithm that trains ``task``: ``name`` (--algorithm), else the last registered
    one that claims it by default. Raises ValueError on an unknown name or a task it does not
    train."""
    if name is not None:
        spec = ALGORITHMS.get(name.lower())
        if spec is None:
            hint = _SB3_NAMES.get(name.lower().replace("-", "").replace("_", ""))
            fix = f"; {hint}" if hint else ""
            raise ValueError(
                f"--algorithm {name}: unknown; choose one of {', '.join(ALGORITHMS)}{fix}"
            )
        if not spec.claims(task):
            own = algorithm_for(task)
            raise ValueError(
                f"--algorithm {name} trains {spec.tasks}, and {task.name} is not one of them "
                f"(it trains with {own.name}); drop --algorithm"
            )
        return spec
    for spec in reversed(ALGORITHMS.values()):
        if spec.by_default and spec.claims(task):
            return spec
    raise ValueError(f"no algorithm trains task {task.name}; registered: {sorted(ALGORITHMS)}")


_SB3_NAMES = {
    "ppo2": "Stable-Baselines3's PPO is --algorithm ppo",
    "a2c": "A2C is PPO with one epoch and no clipping: --algorithm ppo --agent.num-epochs 1",
    "ddpg": "DDPG is TD3 without its smoothing and delay: --algorithm td3",
    "tqc": "TQC is not here; --algorithm sac is its base",
    "crossq": "CrossQ is not here; --algorithm sac is its base",
    "qrdqn": "QR-DQN is not here; --algorithm dqn",
    "doubledqn": "--algorithm dqn is double DQN",
    "ddqn": "--algorithm dqn is double DQN",
}


def with_defaults(cfg: TrainConfig, name: str | None) -> TrainConfig:
    """``cfg`` (a task's defaults) with algorithm ``name``'s defaults on top and
    ``cfg.algorithm`` set (None: the task's own, unchanged)."""
    if name is None:
        return cfg
    spec = algorithm_for(get_task(cfg.task), name)
    name = name.lower()
    cfg = dataclasses.replace(cfg, algorithm=name)
    return spec.defaults(cfg) if spec.defaults is not None else cfg


def unread_options(task: Task, name: str | None = None) -> tuple[str, ...]:
    """The config fields (dotted) that the algorithm training ``task`` never reads: the other
    algorithms' options that are not its own too, and its ``ignores``."""
    algorithm = algorithm_for(task, name)
    mine = {o.name for o in algorithm.options}
    others = [o.name for a in ALGORITHMS.values() for o in a.options if o.name not in mine]
    return tuple(dict.fromkeys([*others, *algorithm.ignores]))


def _get(cfg: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        cfg = getattr(cfg, part)
    return cfg


def _is_set(cfg: TrainConfig, dotted: str) -> bool:
    return bool(_get(cfg, dotted) != _get(TrainConfig(), dotted))


def _words(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def _refusal(
    algorithm: AlgorithmSpec, need: Need, name: str, spec: StrategySpec, task: str
) -> str | None:
    """Why strategy ``name`` (``spec``) cannot give ``need``; None when it can."""
    if need.capability not in spec.lacks:
        return None
    always = [n.capability for n in algorithm.needs if n.option is None]
    givers = [
        other for other, s in STRATEGIES.items() if not {need.capability, *always} & set(s.lacks)
    ]
    return need.refusal.format(
        task=task,
        algorithm=algorithm.name,
        strategy=name,
        why=spec.lacks[need.capability],
        givers=_words(givers),
    )


def check_compatible(cfg: TrainConfig, world_size: int) -> AlgorithmSpec:
    """Refuse, with the reason and the fix, an option that only another algorithm reads, a
    strategy that cannot run (``check_strategy``: unknown, another strategy's options, too few
    processes), and an algorithm or algorithm option that needs what the strategy does not
    give. Returns the algorithm that trains ``cfg.task``. Raises ValueError."""
    task = get_task(cfg.task)
    algorithm = algorithm_for(task, cfg.algorithm)
    mine = {o.name for o in algorithm.options}
    for other in ALGORITHMS.values():
        for option in other.options:
            if option.name not in mine and _is_set(cfg, option.name):
                readers = list(
                    dict.fromkeys(a.tasks for a in ALGORITHMS.values() if option in a.options)
                )
                raise ValueError(
                    option.refusal.format(
                        flag=option.flag,
                        task=cfg.task,
                        algorithm=algorithm.name,
                        tasks=_words(readers),
                    )
                )
    check_strategy(cfg, world_size)
    name = cfg.dist.strategy
    spec = STRATEGIES[name]
    for need in algorithm.needs:
        if need.option is None or _is_set(cfg, need.option):
            why = _refusal(algorithm, need, name, spec, cfg.task)
            if why is not None:
                raise ValueError(why)
    if spec.off_policy(cfg.dist) and not algorithm.corrects_off_policy:
        raise ValueError(
            f"{cfg.task} trains with {algorithm.name}, which cannot learn from rollouts of older "
            f"weights, as --dist.strategy {name} with these options gives; drop --dist.sync async"
        )
    return algorithm


def compatibility_matrix() -> str:
    """Both tables as text: which strategy runs which algorithm (and algorithm option), with the
    reasons, the fewest processes, and the options only one algorithm or strategy reads. This is
    the block under "Two plug-in axes" in docs/architecture.md."""
    names = list(STRATEGIES)
    widths = [max(8, len(n) + 2) for n in names]
    rows: list[tuple[str, list[str]]] = []
    reasons: list[str] = []

    def refused(why: str) -> str:
        if why not in reasons:
            reasons.append(why)
        return f"no ({reasons.index(why) + 1})"

    for algorithm in ALGORITHMS.values():
        always = [n for n in algorithm.needs if n.option is None]
        for option in [None, *dict.fromkeys(n.option for n in algorithm.needs if n.option)]:
            needs = always + [n for n in algorithm.needs if option and n.option == option]
            cells = []
            for name in names:
                lacking = [n for n in needs if n.capability in STRATEGIES[name].lacks]
                why = STRATEGIES[name].lacks[lacking[0].capability] if lacking else None
                cells.append("yes" if why is None else refused(why))
            label = algorithm.name if option is None else f"  + --{option.replace('_', '-')}"
            rows.append((label, cells))
    fewest = [str(STRATEGIES[n].min_world(DistConfig())) for n in names]
    rows.append(("fewest processes", fewest))
    rows.append(
        ("distrl pretrain", ["yes" if STRATEGIES[n].every_rank_learns else "no" for n in names])
    )
    first = max(len(label) for label, _ in rows) + 2
    lines = [
        label.ljust(first) + "".join(c.ljust(w) for c, w in zip(cells, widths, strict=True))
        for label, cells in [("", names), *rows]
    ]
    lines = [line.rstrip() for line in lines]

    def wrapped(text: str, first: str = "", rest: str = "    ") -> list[str]:
        return textwrap.wrap(
            text, 96, initial_indent=first, subsequent_indent=rest, break_on_hyphens=False
        )

    lines.append("")
    for i, why in enumerate(reasons, 1):
        lines += wrapped(why, f"({i}) ")
    async_ = dataclasses.replace(DistConfig(), sync="async")
    older = [n for n in names if STRATEGIES[n].off_policy(async_)]
    correct = [a.name for a in ALGORITHMS.values() if a.corrects_off_policy]
    if older:
        lines += wrapped(
            f"Rollouts of older weights (--dist.sync async): {_words(older)}; "
            f"{_words(correct) if correct else 'no algorithm'} take them (PPO corrects them "
            f"with V-trace, a replay holds older weights' transitions anyway), the others "
            f"are refused there."
        )
    lines += ["", "Options only some algorithms read (refused under the others):"]
    for algorithm in ALGORITHMS.values():
        flags = ", ".join(o.flag for o in algorithm.options)
        lines += wrapped(f"{algorithm.name}: {flags}", "  ")
    if any(a.ignores for a in ALGORITHMS.values()):
        lines.append("Options an algorithm does not read (accepted, without effect):")
        for algorithm in ALGORITHMS.values():
            if algorithm.ignores:
                flags = ", ".join("--" + o.replace("_", "-") for o in algorithm.ignores)
                lines += wrapped(f"{algorithm.name}: {flags}", "  ")
    lines.append("Options only some strategies read (refused under the others):")
    for name, spec in STRATEGIES.items():
        if spec.options:
            flags = ", ".join("--dist." + o.replace("_", "-") for o in spec.options)
            lines += wrapped(f"{name}: {flags}", "  ")
    return "\n".join(lines) + "\n"
