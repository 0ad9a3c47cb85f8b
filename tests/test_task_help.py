"""``train <task> --help`` lists only what the task's algorithm reads (the algorithm registry's
``unread_options``), without ``--task``; parsing still takes every field of TrainConfig."""

from __future__ import annotations

import dataclasses
import re

import pytest

from distrl.args import parse_train_args, task_help_hides
from distrl.config import MultiTaskConfig
from distrl.envs.registry import list_tasks
from tests.helpers import run_main

pytestmark = pytest.mark.timeout(60)

MULTITASK_FLAGS = [
    "--multitask." + f.name.replace("_", "-") for f in dataclasses.fields(MultiTaskConfig)
]


def _flag(dotted: str) -> re.Pattern[str]:
    """``--agent.gamma`` as a whole flag (not ``--agent.gamma-x``, not ``--task`` in
    ``--tasks``)."""
    return re.compile("--" + re.escape(dotted.replace("_", "-")) + r"(?![\w.-])")


def _help(capsys, monkeypatch, task: str) -> str:
    monkeypatch.setenv("COLUMNS", "100")
    code, out, err = run_main(["train", task, "--help"], capsys)
    assert code == 0, out + err
    assert f"usage: train {task}" in out, out
    return out


def test_a_ppo_task_help_has_no_multitask_section_and_no_task_flag(capsys, monkeypatch):
    out = _help(capsys, monkeypatch, "cartpole")
    assert "--multitask." not in out, out
    assert not _flag("task").search(out), out
    for flag in ("--agent.gamma", "--agent.total-timesteps", "--policy.recurrent", "--seed"):
        assert _flag(flag[2:]).search(out), flag  # what PPO reads stays


def test_a_suite_help_has_its_multitask_flags_not_what_rloo_ignores(capsys, monkeypatch):
    out = _help(capsys, monkeypatch, "reach10")
    for flag in MULTITASK_FLAGS:
        assert _flag(flag[2:]).search(out), flag
    assert not _flag("task").search(out), out
    for dotted in ("agent.total_timesteps", "policy.recurrent", "agent.gamma", "agent.vf_coef"):
        assert not _flag(dotted).search(out), dotted
    assert _flag("agent.clip-coef").search(out) and _flag("env.num-envs").search(out)


TASKS = [t.name for t in list_tasks()]


@pytest.mark.parametrize("task", TASKS)
def test_every_task_help_renders_and_mentions_nothing_it_hides(capsys, monkeypatch, task):
    """Not as a flag, nor in another flag's text (a docstring pointing at a hidden flag)."""
    monkeypatch.setenv("COLUMNS", "100")
    code, out, err = run_main(["train", task, "--help"], capsys)
    if code == 2 and "pip install" in err:  # its extra is not installed here (metaworld)
        pytest.skip(err.strip())
    assert code == 0 and f"usage: train {task}" in out, out + err
    hidden = task_help_hides(task)
    assert "task" in hidden
    for dotted in hidden:
        assert not _flag(dotted).search(out), (task, dotted)


def test_hidden_fields_still_parse():
    """Only the help changes: a flag a task's help leaves out is parsed, then refused or
    accepted as before."""
    assert parse_train_args(["reach10", "--agent.gamma", "0.9"]).agent.gamma == 0.9
    cfg = parse_train_args(["cartpole", "--multitask.group-size", "4"])
    assert cfg.multitask.group_size == 4  # refused later, by the compatibility check
    with pytest.raises(ValueError, match="contradicts the positional task"):
        parse_train_args(["cartpole", "--task", "acrobot"])


def test_help_text_is_reflowed_to_the_terminal_not_the_source_lines(capsys, monkeypatch):
    """A docstring's line breaks do not reach the help (tyro kept them, and wrapping them again
    left short ragged lines): every line of a long option's help but its last is full."""
    for argv in (["train", "cartpole", "--help"], ["export", "--help"]):
        monkeypatch.setenv("COLUMNS", "80")  # narrower than the source
        code, out, err = run_main(argv, capsys)
        assert code == 0, out + err
        flag = "--stop-timeout FLOAT" if argv[0] == "train" else "--format {onnx,torchscript}"
        lines = out.splitlines()
        start = next(i for i, line in enumerate(lines) if line.strip("│ ").startswith(flag))
        start += 1
        block = []
        for line in lines[start:]:
            text = line.strip("│ ")
            if text.startswith("-") or not text:
                break
            block.append(text)
        assert len(block) >= 2, block
        assert all(len(t) > 60 for t in block[:-1]), block


def test_the_network_flag_names_every_built_in_network():
    """--policy.network's help (its field's docstring, which tyro prints) lists the names."""
    import inspect

    from distrl.config import PolicyConfig
    from distrl.policy.networks import network_names

    source = inspect.getsource(PolicyConfig)
    doc = source[source.index("network: str") :].split('"""')[1]
    assert all(name in doc for name in network_names()), doc
