"""``train <task> [overrides]`` into a ``TrainConfig``, in two steps (as mjlab does): the task name
selects the task's tuned default config, then tyro parses the overrides on top of it.

Its own module so that what builds a run from command-line words (``distrl train``, ``bench
roofline``) shares it without importing the CLI. Every command parses its flags with
``parse_flags``, so a boolean is written the same way everywhere: ``--progress False``.
"""

from __future__ import annotations

import dataclasses
import datetime
import difflib
import itertools
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import tyro
import yaml
from tyro.constructors import (
    ConstructorRegistry,
    StructConstructorSpec,
    StructFieldSpec,
    StructTypeInfo,
)

from distrl import quick_flags
from distrl.config import TrainConfig, from_dict, validate

T = TypeVar("T")

TYRO_CONFIG = (tyro.conf.FlagConversionOff,)
"""How every command parses its flags (``parse_flags``): a boolean takes a value, ``--progress
False``, as DD-PPO's torchrun recipe writes ``--distributed True``; tyro's ``--no-progress``
spelling does not exist."""

BOOL_VALUES = ("True", "False")


def bool_flags(cls: type) -> list[str]:
    """The boolean flags of dataclass ``cls``, without their dashes (``env.check-finite``)."""
    return [leaf.flag for leaf in quick_flags.leaves(cls) if leaf.hint is bool]


def check_bool_spelling(cls: type, argv: Sequence[str]) -> None:
    """Refuse, naming the spelling that works, a boolean flag of ``cls`` written as tyro's
    default writes it: ``--no-check`` (``--check False``) or a bare ``--check`` (``--check
    True``). Raises ValueError."""
    flags = set(bool_flags(cls))
    for i, word in enumerate(argv):
        if word == "--":
            return
        if not word.startswith("--"):
            continue
        name, eq, _ = word[2:].partition("=")
        name = name.replace("_", "-")
        section, dot, leaf = name.rpartition(".")
        negated = {section + dot + leaf[3:]} if leaf.startswith("no-") else set()
        if name.startswith("no-"):  # --no-env.check-finite
            negated.add(name[3:])
        for positive in sorted(negated & flags):
            raise ValueError(
                f"--{name} is now --{positive} False: every distrl command takes a boolean as "
                f"--flag True or --flag False"
            )
        if name in flags and not eq and (i + 1 == len(argv) or argv[i + 1].startswith("--")):
            raise ValueError(
                f"--{name} takes a value: --{name} True or --{name} False, as every distrl "
                f"command writes a boolean"
            )


def parse_flags(
    cls: type[T],
    argv: Sequence[str],
    prog: str,
    default: T | None = None,
    registry: ConstructorRegistry | None = None,
) -> T:
    """``argv`` parsed by tyro into ``cls`` (on top of ``default``), as every distrl command
    parses its flags: ``TYRO_CONFIG``, and the old ``--no-flag`` spelling refused naming the
    new one (ValueError). ``registry``: tyro's rules for types (``_help_registry``)."""
    check_bool_spelling(cls, argv)
    parsed = tyro.cli(
        cls,
        args=list(argv),
        prog=prog,
        default=default,
        config=TYRO_CONFIG,
        registry=registry or _registry({}),
    )
    return typing.cast(T, parsed)


def default_run_dir(task: str) -> Path:
    """A new directory ``runs/<task>/<timestamp>``, created here: two runs started in the same
    second get ``<timestamp>`` and ``<timestamp>-2`` (``mkdir`` claims a name atomically)."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    parent = Path("runs") / task.replace(":", "_").replace("/", "_")
    parent.mkdir(parents=True, exist_ok=True)
    for n in itertools.count(1):
        path = parent / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise AssertionError("unreachable")


def _unknown_keys(cls: type, data: dict, prefix: str = "") -> list[str]:
    """Dotted keys of ``data`` that are no field of dataclass ``cls``, each with close matches."""
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    out = []
    for key, value in data.items():
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=2)
            out.append(
                prefix + str(key) + (f" (did you mean {' or '.join(close)}?)" if close else "")
            )
        elif dataclasses.is_dataclass(hints[key]) and isinstance(value, dict):
            out += _unknown_keys(hints[key], value, f"{prefix}{key}.")
    return out


def load_config_file(path: str | Path) -> TrainConfig:
    """A run's ``config.yaml`` as the config to train it again: run directory, resume and
    ``distributed`` are reset (they belong to the run that wrote it), the rest is kept."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ValueError(f"--config {path}: no such file; pass a run's config.yaml")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise ValueError(f"--config {path}: not valid YAML: {e}") from e
    if not isinstance(data, dict) or "task" not in data:
        raise ValueError(f"--config {path}: expected a mapping with at least a 'task' key")
    unknown = _unknown_keys(TrainConfig, data)
    if unknown:
        raise ValueError(f"--config {path}: unknown keys: {'; '.join(unknown)}")
    from distrl.envs.registry import check_task_from_file, get_task

    check_task_from_file(data["task"], f"--config {path}")  # a file imports no module
    task = get_task(data["task"])  # unknown names raise with close matches
    try:
        cfg = from_dict(data)
    except TypeError as e:
        raise ValueError(f"--config {path}: {e}") from e
    cfg = dataclasses.replace(cfg, task=task.name, run_dir=None, resume=None, distributed=False)
    return validate(cfg)


def _take_config_flag(argv: list[str]) -> tuple[str | None, list[str]]:
    """(path of --config PATH / --config=PATH, argv without it)."""
    for i, word in enumerate(argv):
        if word == "--config":
            if i + 1 >= len(argv):
                raise ValueError("--config needs a path, e.g. --config runs/cartpole/x/config.yaml")
            return argv[i + 1], argv[:i] + argv[i + 2 :]
        if word.startswith("--config="):
            return word.split("=", 1)[1], argv[:i] + argv[i + 1 :]
    return None, argv


def _take_import_flags(argv: list[str]) -> tuple[list[str], list[str]]:
    """(modules of every --import MODULE / --import=MODULE, argv without them)."""
    modules, rest, i = [], [], 0
    while i < len(argv):
        word = argv[i]
        if word == "--import":
            if i + 1 >= len(argv) or argv[i + 1].startswith("-"):
                raise ValueError("--import needs a module name, e.g. --import mytasks")
            modules.append(argv[i + 1])
            i += 2
            continue
        if word.startswith("--import="):
            modules.append(word.split("=", 1)[1])
        else:
            rest.append(word)
        i += 1
    return modules, rest


IMPORTED: list[str] = []
"""Every module ``--import`` named in this process, in order (the resume command repeats
them)."""


def import_modules(names: list[str]) -> None:
    """``--import MODULE``: import the user's modules (which register their tasks, networks and
    hooks) before the task is resolved. Found as ``python -m`` finds a module: the current
    directory first, then the path. Only the command line names them, never a config file;
    ``distrl train --nproc N`` passes them on to every rank."""
    import importlib
    import os
    import sys

    if names and os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    for name in names:
        if name not in IMPORTED:
            IMPORTED.append(name)
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name is None or not (name == e.name or name.startswith(e.name + ".")):
                raise  # the module itself imports something missing: its own traceback
            raise ValueError(
                f"--import {name}: no module named {e.name!r} in the current directory or on "
                f"the Python path (PYTHONPATH)"
            ) from e


def take_imports(argv: list[str]) -> list[str]:
    """Import the modules every ``--import MODULE`` names (``import_modules``) and return argv
    without those flags: what ``play`` and ``export`` do before they parse, so that a run of a
    task registered by the user's module can be loaded again."""
    modules, rest = _take_import_flags(list(argv))
    import_modules(modules)
    return rest


def resumed_run_dir(resume: str | None) -> Path | None:
    """The run directory that holds ``--resume PATH`` (a run directory, its ``checkpoints/``, or
    a ``ckpt_*.pt`` in it); None for ``auto``, no resume, or a path in no run directory."""
    if resume in (None, "auto"):
        return None
    path = Path(str(resume)).expanduser()
    if path.is_file():
        path = path.parent
    if path.name == "checkpoints":
        path = path.parent
    return path if (path / "checkpoints").is_dir() else None


def parse_train_args(argv: list[str]) -> TrainConfig:
    """``_parse_train_args``; a ``--resume PATH`` without ``--run-dir`` continues in the run
    directory that holds PATH (its curves, its checkpoints), as ``--resume auto`` does, rather
    than in a new one."""
    cfg = _parse_train_args(argv)
    if cfg.run_dir is None and (run := resumed_run_dir(cfg.resume)) is not None:
        cfg = dataclasses.replace(cfg, run_dir=str(run))
    return cfg


def _parse_train_args(argv: list[str]) -> TrainConfig:
    """Task first, then tyro overrides on the task's defaults. Raises ValueError on bad input.
    ``--config PATH`` (a run's config.yaml) replaces the task's defaults by that run's config;
    the task may then be left out. ``--import MODULE`` (repeatable) imports MODULE first, for
    tasks it registers (``distrl.register_task``)."""
    from distrl.envs.registry import get_task
    from distrl.runner.algorithms import with_defaults

    argv = take_imports(argv)
    config_path, argv = _take_config_flag(argv)
    if config_path is not None:
        # The command line's task first: it may import a gym:<module>:<Id>'s module, the file not
        named = get_task(argv[0]) if argv and not argv[0].startswith("-") else None
        base = load_config_file(config_path)
        if named is not None:
            if named.name != base.task:
                raise ValueError(
                    f"task {argv[0]!r} contradicts --config {config_path} (task {base.task!r}); "
                    f"leave the task out to repeat that run"
                )
            argv = argv[1:]
        return _parse_overrides(base, argv)
    if not argv or argv[0].startswith("-"):
        if argv and argv[0] in ("-h", "--help"):
            print(
                "usage: train <task> [overrides]\n       train --config RUN/config.yaml "
                "[overrides]   (repeat a run)\n       train --import MODULE <task> [overrides]"
                "   (MODULE registers the task: distrl.register_task)\n\n`distrl list` "
                "shows the tasks; `train <task> --help` shows every override that task reads, with "
                "its default."
            )
            raise SystemExit(0)
        raise ValueError("usage: train <task> [overrides]; `distrl list` shows the tasks")
    task = get_task(argv[0])  # unknown names raise with close matches
    algorithm, rest = _take_algorithm_flag(argv[1:])
    defaults = dataclasses.replace(task.default_config(), task=task.name)
    return _parse_overrides(with_defaults(defaults, algorithm), rest)


def _take_algorithm_flag(argv: list[str]) -> tuple[str | None, list[str]]:
    """``--algorithm NAME`` (or ``=NAME``) out of ``argv``: its defaults come before the other
    flags (``runner/algorithms.with_defaults``)."""
    rest, name = [], None
    it = iter(range(len(argv)))
    for i in it:
        word = argv[i]
        if word == "--algorithm" and i + 1 < len(argv):
            name = argv[i + 1]
            next(it, None)
        elif word.startswith("--algorithm="):
            name = word.split("=", 1)[1]
        else:
            rest.append(word)
    return name, rest


def flag_names(cls: type = TrainConfig, aliases: bool = False) -> list[str]:
    """Every override flag of dataclass ``cls``, without its dashes (``agent.learning-rate``);
    ``aliases``: theirs too (``tyro.conf.arg(aliases=...)``)."""
    out: list[str] = []
    for leaf in quick_flags.leaves(cls):
        out.append(leaf.flag)
        for marker in leaf.markers if aliases else ():
            out += [a.lstrip("-") for a in getattr(marker, "aliases", None) or ()]
    return out


def _initials(words: str) -> str:
    return "".join(w[0] for w in words.split("-") if w)


def suggest_flags(flag: str, known: list[str]) -> list[str]:
    """Known flags close to an unknown one, by the last dotted part (``agent.lr``: the
    ``learning-rate`` of any section, its own first): the same name, one whose words' initials
    it is, one it begins (``ent``: ``ent-coef``), or a close spelling."""
    section, _, leaf = flag.replace("_", "-").rpartition(".")
    leaves = {k: k.rpartition(".")[2] for k in known}
    close = set(difflib.get_close_matches(leaf, set(leaves.values()), n=3))
    found = [k for k, v in leaves.items() if v == leaf]
    found += [k for k, v in leaves.items() if len(leaf) > 1 and _initials(v) == leaf]
    found += [k for k, v in leaves.items() if v.startswith(leaf + "-")]
    found += [k for k, v in leaves.items() if v in close]
    found = list(dict.fromkeys(found))
    found.sort(key=lambda k: k.rpartition(".")[0] != section)  # stable: its own section first
    return found[:3]


def _refuse_unknown_flags(argv: list[str]) -> None:
    """An unknown ``--flag`` with a close known one is refused naming it (tyro's own guess
    compares whole names, so ``--agent.lr`` got ``--agent.lr-schedule``); without one, tyro
    reports it."""
    names = set(flag_names(aliases=True))
    for word in argv:
        if not word.startswith("--") or word == "--help":
            continue
        flag = word[2:].split("=", 1)[0]
        if flag.replace("_", "-") in names:
            continue
        close = suggest_flags(flag, flag_names())
        if close:
            raise ValueError(
                f"unknown option --{flag}; did you mean {' or '.join('--' + c for c in close)}?"
            )


def _hidden_fields(cls: type, dotted: list[str]) -> dict[type, set[str]]:
    """``dotted`` fields below dataclass ``cls`` (``agent.gamma``) as {dataclass: its field
    names}; a section whose every field is hidden is hidden whole, in its parent."""
    hints = typing.get_type_hints(cls)
    out: dict[type, set[str]] = {}
    mine: set[str] = set()
    for f in dataclasses.fields(cls):
        inner = [d.partition(".")[2] for d in dotted if d.startswith(f.name + ".")]
        if f.name in dotted:
            mine.add(f.name)
        elif inner and dataclasses.is_dataclass(hints[f.name]):
            section = typing.cast(type, hints[f.name])
            below = _hidden_fields(section, inner)
            if below.get(section) == {g.name for g in dataclasses.fields(section)}:
                mine.add(f.name)
            else:
                out |= below
    if mine:
        out[cls] = mine
    return out


def task_help_hides(task: str, algorithm: str | None = None) -> list[str]:
    """The fields ``train <task> --help`` leaves out (dotted): ``task`` (the positional
    argument gives it) and every field the task's algorithm does not read
    (``runner.algorithms.unread_options``). Parsing still takes them: a set one is refused by
    the compatibility check, naming the reason, or has no effect (``AlgorithmSpec.ignores``)."""
    from distrl.envs.registry import get_task
    from distrl.runner.algorithms import unread_options

    return ["task", *unread_options(get_task(task), algorithm)]


def _help_registry(task: str, algorithm: str | None = None) -> ConstructorRegistry:
    """A tyro registry under which TrainConfig's help shows only what ``task`` (trained with
    ``algorithm``) reads: the fields of ``task_help_hides`` are marked ``tyro.conf.Suppress``."""
    return _registry(_hidden_fields(TrainConfig, task_help_hides(task, algorithm)))


def _reflow(text: str) -> str:
    """A docstring's paragraphs as single lines: tyro keeps the source's line breaks, and
    wrapping them again to the terminal's width left every option's help ragged."""
    return "\n\n".join(" ".join(p.split()) for p in text.split("\n\n"))


def _reflowed(f: StructFieldSpec) -> StructFieldSpec:
    text = f.helptext
    if isinstance(text, str):
        return dataclasses.replace(f, helptext=_reflow(text))
    if callable(text):
        lazy = text
        return dataclasses.replace(f, helptext=lambda: _reflow(lazy() or "") or None)
    return f


def _registry(hidden: dict[type, set[str]]) -> ConstructorRegistry:
    """tyro's rules for every distrl command: each option's help reflowed (``_reflow``), and
    the fields ``hidden`` names (per dataclass) marked ``tyro.conf.Suppress``."""
    registry = ConstructorRegistry()
    inside: list[bool] = []  # while the rule asks tyro's own rules for a dataclass's fields

    def hide(f: StructFieldSpec) -> StructFieldSpec:
        suppressed: Any = typing.Annotated[f.type, tyro.conf.Suppress]
        return dataclasses.replace(f, type=suppressed)

    @registry.struct_rule
    def suppress(info: StructTypeInfo) -> Any:
        if inside or not dataclasses.is_dataclass(info.type):
            return None
        names = hidden.get(info.type, set())
        inside.append(True)
        try:
            spec = ConstructorRegistry.get_struct_spec(info)
        finally:
            inside.pop()
        if not isinstance(spec, StructConstructorSpec):  # an error tyro reports itself
            return spec
        fields = tuple(_reflowed(hide(f) if f.name in names else f) for f in spec.fields)
        return dataclasses.replace(spec, fields=fields)

    return registry


def _parse_overrides(defaults: TrainConfig, argv: list[str]) -> TrainConfig:
    """tyro's parse of the override flags ``argv`` on top of ``defaults``. With ``--help``, the
    help lists only the fields the task's algorithm reads (``task_help_hides``)."""
    check_bool_spelling(TrainConfig, argv)  # before the guess at an unknown flag
    _refuse_unknown_flags(argv)
    asks_help = any(word in ("-h", "--help") for word in argv)
    registry = _help_registry(defaults.task, defaults.algorithm) if asks_help else None
    prog = f"train {defaults.task}"
    cfg = None if asks_help else quick_flags.parse(defaults, argv)  # the common words, fast
    if cfg is None:
        cfg = parse_flags(TrainConfig, argv, prog, default=defaults, registry=registry)
    if cfg.task != defaults.task:
        raise ValueError(
            f"--task {cfg.task!r} contradicts the positional task {defaults.task!r}; give the task "
            f"once, as the first argument"
        )
    return validate(cfg)
