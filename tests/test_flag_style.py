"""One way to write a boolean flag in every command: ``--flag True`` / ``--flag False``
(``distrl.args.parse_flags``), the spelling DD-PPO's torchrun recipe needs (``--distributed
True``); tyro's ``--no-flag`` spelling is refused naming the new one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks import cli as bench_cli
from distrl import averaging, demos, exporting, play, pretrain, session, sweep
from distrl.args import bool_flags
from distrl.config import TrainConfig
from tests.helpers import run_main

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[1]


class Parsed(ValueError):
    """Raised by a command's stand-in with what the command parsed (the CLI prints it)."""


def _report(what):
    raise Parsed(f"parsed: {what!r}")


# command -> (argv up to its flags, its arguments' class, (module, function) the parsed
# arguments reach: replaced by a stand-in that reports them)
COMMANDS = {
    "train": (["train", "cartpole"], TrainConfig, (session, "check_before_start")),
    "play": (["play", "runs/x"], play.PlayArgs, (play, "play")),
    "export": (["export", "runs/x"], exporting.ExportArgs, None),
    "average": (["average", "runs/x"], averaging.AverageArgs, (averaging, "average")),
    "demos": (["demos", "reach10"], demos.DemosArgs, (demos, "demos_main")),
    "pretrain": (
        ["pretrain", "reach10", "--demos", "d.pt"],
        pretrain.PretrainArgs,
        (pretrain, "pretrain"),
    ),
    "sweep": (["sweep", "cartpole"], sweep.SweepArgs, (sweep, "run_sweep")),
    **{
        f"bench {name}": (["bench", name], cls, None)
        for name, (cls, _) in bench_cli.COMMANDS.items()
    },
}

BOOLEANS = [
    (command, flag) for command, (_, cls, _) in COMMANDS.items() for flag in bool_flags(cls)
]


def _stand_in(monkeypatch, command: str) -> None:
    _, _, target = COMMANDS[command]
    if command == "export":  # export_policy(path, format, output, check=)
        monkeypatch.setattr(exporting, "export_policy", lambda *a, **k: _report(k))
    elif command.startswith("bench "):
        name = command.split()[1]
        cls, _ = bench_cli.COMMANDS[name]
        monkeypatch.setitem(bench_cli.COMMANDS, name, (cls, _report))
    else:
        module, function = target
        monkeypatch.setattr(module, function, lambda *a, **k: _report(a[0]))


def test_the_table_covers_every_command_and_every_boolean():
    names = {c.split()[0] for c in COMMANDS}
    assert names == {"train", "play", "export", "average", "demos", "pretrain", "sweep", "bench"}
    assert set(bench_cli.COMMANDS) == {c.split()[1] for c in COMMANDS if c.startswith("bench ")}
    assert ("export", "check") in BOOLEANS and ("train", "distributed") in BOOLEANS
    assert ("bench straggler", "straggler") in BOOLEANS


@pytest.mark.parametrize("value", ["True", "False"])
@pytest.mark.parametrize(("command", "flag"), BOOLEANS, ids=[f"{c}:{f}" for c, f in BOOLEANS])
def test_every_command_parses_a_boolean_flag_with_its_value(
    monkeypatch, capsys, command, flag, value
):
    _stand_in(monkeypatch, command)
    head, _, _ = COMMANDS[command]
    code, out, err = run_main([*head, f"--{flag}", value], capsys)
    assert code == 2 and "parsed: " in err, out + err
    attr = flag.replace("-", "_")
    if command == "export":
        assert f"'{attr}': {value}" in err, err
    else:  # the dataclass's repr: nested sections print as Section(field=value, ...)
        assert re.search(rf"\b{re.escape(attr.rpartition('.')[2])}={value}\b", err), err


@pytest.mark.parametrize(("command", "flag"), BOOLEANS, ids=[f"{c}:{f}" for c, f in BOOLEANS])
def test_the_old_spelling_is_refused_naming_the_new_one(monkeypatch, capsys, command, flag):
    _stand_in(monkeypatch, command)
    head, _, _ = COMMANDS[command]
    section, dot, leaf = flag.rpartition(".")
    old = f"--{section}{dot}no-{leaf}"
    code, out, err = run_main([*head, old], capsys)
    assert code == 2, out + err
    assert f"{old} is now --{flag} False" in err, err
    assert "Traceback" not in err
    code, out, err = run_main([*head, f"--{flag}"], capsys)  # bare: tyro's other spelling
    assert code == 2 and f"--{flag} takes a value: --{flag} True or --{flag} False" in err, err


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_help_shows_booleans_as_flag_true_false(monkeypatch, capsys, command):
    monkeypatch.setenv("COLUMNS", "100")  # one column: an option starts its line
    head, cls, _ = COMMANDS[command]
    code, out, err = run_main([*head[:2], "--help"], capsys)
    assert code == 0, out + err
    assert "--no-" not in out, out
    options = dict(re.findall(r"^(?:│ | {1,3})(--[\w.-]+) ?(\S*)", out, re.M))
    shown = [f for f in bool_flags(cls) if f"--{f}" in options]
    assert shown or not bool_flags(cls), out
    for flag in shown:
        assert options[f"--{flag}"] == "{True,False}", (flag, out)


def test_every_tyro_parse_goes_through_parse_flags():
    """A command parsing with tyro.cli directly would take tyro's default --no-flag spelling."""
    calls = [
        f"{path.relative_to(ROOT)}:{n}"
        for folder in ("src/distrl", "benchmarks")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path.name != "args.py"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "tyro.cli(" in line
    ]
    assert calls == [], calls
