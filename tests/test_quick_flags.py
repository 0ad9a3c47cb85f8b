"""The `train` overrides parsed without tyro (``distrl.quick_flags``) give exactly tyro's config
for every scalar field and the values users write, and leave everything else to tyro."""

from __future__ import annotations

import dataclasses
import typing
from typing import Literal

import pytest

from distrl import args, quick_flags
from distrl.config import TrainConfig

DEFAULTS = TrainConfig(task="cartpole")
FLOATS = ("0.5", "1e-3", "3E-4", "2.", ".25", "1e+2", "7")
INTS = ("3", "0", "10", "4096")


def samples(hint: typing.Any) -> list[str]:
    """Words to try for a field of type ``hint``."""
    if typing.get_origin(hint) in (typing.Union, __import__("types").UnionType):
        inner = next(a for a in typing.get_args(hint) if a is not type(None))
        return ["None", *samples(inner)]
    if hint is bool:
        return ["True", "False"]
    if typing.get_origin(hint) is Literal:
        return list(typing.get_args(hint))
    if hint is int:
        return list(INTS)
    if hint is float:
        return list(FLOATS)
    return ["abc", "runs/x y", "1e-3"]


def rounds() -> list[list[str]]:
    """Every scalar flag in every round, round k with its k-th sample (cycling), half of them
    in the ``--flag=value`` form: one tyro parse per round."""
    fields = quick_flags.scalar_fields()
    width = max(len(samples(hint)) for _, hint in fields.values())
    out = []
    for k in range(width):
        argv: list[str] = []
        for i, (flag, (path, hint)) in enumerate(sorted(fields.items())):
            if path == "task":
                continue  # the positional task's, checked apart
            words = samples(hint)
            word = words[k % len(words)]
            argv += [f"--{flag}={word}"] if (i + k) % 2 else [f"--{flag}", word]
        out.append(argv)
    return out


@pytest.mark.parametrize("argv", rounds(), ids=lambda a: a[1][:20])
def test_every_scalar_field_parses_as_tyro_parses_it(argv):
    quick = quick_flags.parse(DEFAULTS, argv)
    assert quick is not None, argv
    slow = args.parse_flags(TrainConfig, argv, "train cartpole", default=DEFAULTS)
    assert quick == slow
    assert dataclasses.asdict(quick) == dataclasses.asdict(slow)  # types too (1 vs 1.0)
    for a, b in zip(
        _leaves(dataclasses.asdict(quick)), _leaves(dataclasses.asdict(slow)), strict=True
    ):
        assert type(a) is type(b), (a, b)


def _leaves(d: typing.Any) -> list:
    return [x for v in d.values() for x in _leaves(v)] if isinstance(d, dict) else [d]


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["-h"],
        ["--env.scene.num-envs", "4"],  # an alias
        ["--policy.actor-hidden", "64", "64"],  # a tuple
        ["--seed", "3", "--seed", "4"],  # given twice
        ["--seed"],  # no value
        ["--seed="],
        ["--seed", "-3"],
        ["--seed", "1_000"],
        ["--seed", "3.0"],
        ["--agent.learning-rate", "inf"],
        ["--agent.learning-rate", "nan"],
        ["--agent.learning-rate", "1_0"],
        ["--progress", "true"],
        ["--dist.strategy", "ps"],
        ["cartpole"],
        ["--no-such.flag", "1"],
    ],
)
def test_anything_else_is_left_to_tyro(argv):
    assert quick_flags.parse(DEFAULTS, argv) is None


def test_a_plain_command_line_builds_no_tyro_parser(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("tyro.cli called")

    monkeypatch.setattr(args.tyro, "cli", refuse)
    cfg = args.parse_train_args(
        ["cartpole", "--seed", "3", "--env.num-envs=64", "--agent.learning-rate", "3e-4"]
    )
    assert (cfg.seed, cfg.env.num_envs, cfg.agent.learning_rate) == (3, 64, 3e-4)
    with pytest.raises(AssertionError, match="tyro.cli called"):  # a tuple: tyro's turn
        args.parse_train_args(["cartpole", "--policy.actor-hidden", "32", "32"])


def test_the_task_flag_still_has_to_agree_with_the_positional_one():
    with pytest.raises(ValueError, match="contradicts the positional task"):
        args.parse_train_args(["cartpole", "--task", "pendulum"])
