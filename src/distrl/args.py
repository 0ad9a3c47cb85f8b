"""``train <task> [overrides]`` into a ``TrainConfig``, in two steps (as mjlab does): the task name
selects the task's tuned default config, then tyro parses the overrides on top of it.

Its own module so that what builds a run from command-line words (``distrl train``, ``bench
roofline``) shares it without importing the CLI.
"""

from __future__ import annotations

import dataclasses
import datetime
from pathlib import Path

import tyro

from distrl.config import TrainConfig, validate


def default_run_dir(task: str) -> Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("runs") / task.replace(":", "_").replace("/", "_") / stamp


def parse_train_args(argv: list[str]) -> TrainConfig:
    """Task first, then tyro overrides on the task's defaults. Raises ValueError on bad input."""
    from distrl.envs.registry import get_task

    if not argv or argv[0].startswith("-"):
        if argv and argv[0] in ("-h", "--help"):
            print(
                "usage: train <task> [overrides]\n\n`distrl list` shows the tasks; "
                "`train <task> --help` shows every override with its default."
            )
            raise SystemExit(0)
        raise ValueError("usage: train <task> [overrides]; `distrl list` shows the tasks")
    task = get_task(argv[0])  # unknown names raise with close matches
    defaults = dataclasses.replace(task.default_config(), task=task.name)
    cfg = tyro.cli(
        TrainConfig,
        default=defaults,
        args=argv[1:],
        prog=f"train {task.name}",
        # `--distributed True`, as DD-PPO's torchrun recipe writes it
        config=(tyro.conf.FlagConversionOff,),
    )
    if cfg.task != task.name:
        raise ValueError(
            f"--task {cfg.task!r} contradicts the positional task {task.name!r}; give the task "
            f"once, as the first argument"
        )
    return validate(cfg)
