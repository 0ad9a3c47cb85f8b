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

from distrl.config import DistConfig, MultiTaskConfig, TrainConfig
from distrl.distributed.base import Strategy
from distrl.distributed.strategies import (
    AGREED_STATS,
    STATS_WHERE_WEIGHTS,
    STRATEGIES,
    WHOLE_EPISODES,
    StrategySpec,
    check_strategy,
)
from distrl.envs.core import VecEnv
from distrl.envs.registry import Task, get_task
from distrl.runner.base import Runner
from distrl.runner.episodic import EpisodicRunner
from distrl.runner.hooks import Hooks
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
)
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
        options=_PPO_OPTIONS,
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
        options=_SUITE_OPTIONS,
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


def algorithm_for(task: Task) -> AlgorithmSpec:
    """The algorithm that trains ``task``: the last registered one that claims it."""
    for spec in reversed(ALGORITHMS.values()):
        if spec.claims(task):
            return spec
    raise ValueError(f"no algorithm trains task {task.name}; registered: {sorted(ALGORITHMS)}")


def unread_options(task: Task) -> tuple[str, ...]:
    """The config fields (dotted) that the algorithm training ``task`` never reads: the other
    algorithms' options that are not its own too, and its ``ignores``."""
    algorithm = algorithm_for(task)
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
    algorithm = algorithm_for(task)
    mine = {o.name for o in algorithm.options}
    for other in ALGORITHMS.values():
        for option in other.options:
            if option.name not in mine and _is_set(cfg, option.name):
                readers = [a.tasks for a in ALGORITHMS.values() if option in a.options]
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
            f"{_words(correct) if correct else 'no algorithm'} corrects them (V-trace), the "
            f"others are refused there."
        )
    lines += ["", "Options only one algorithm reads (refused on another's task):"]
    for algorithm in ALGORITHMS.values():
        flags = ", ".join(o.flag for o in algorithm.options)
        lines += wrapped(f"{algorithm.name}: {flags}", "  ")
    if any(a.ignores for a in ALGORITHMS.values()):
        lines.append("Options an algorithm does not read (accepted, without effect):")
        for algorithm in ALGORITHMS.values():
            if algorithm.ignores:
                flags = ", ".join("--" + o.replace("_", "-") for o in algorithm.ignores)
                lines += wrapped(f"{algorithm.name}: {flags}", "  ")
    lines.append("Options only one strategy reads (refused under another):")
    for name, spec in STRATEGIES.items():
        if spec.options:
            flags = ", ".join("--dist." + o.replace("_", "-") for o in spec.options)
            lines += wrapped(f"{name}: {flags}", "  ")
    return "\n".join(lines) + "\n"
