"""The algorithm registry: an algorithm added as one file and one registry line trains through
``distrl.train`` on real Gloo ranks; the docs' compatibility matrix is the one the two registries
print; every option only one algorithm reads is refused on another's task with its message."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import torch

from distrl.config import AgentConfig, DistConfig, MultiTaskConfig, PolicyConfig, TrainConfig
from distrl.distributed.strategies import STRATEGIES
from distrl.envs.registry import get_task
from distrl.runner.algorithms import (
    ALGORITHMS,
    algorithm_for,
    check_compatible,
    compatibility_matrix,
)
from distrl.runner.episodic import EpisodicRunner
from distrl.runner.on_policy import OnPolicyRunner
from tests.distributed.harness import expect_ok, run_ranks
from tests.runner.example_algorithm import train_clipped

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def test_an_algorithm_added_in_one_file_trains_through_distrl_train_on_real_ranks(tmp_path):
    run = str(tmp_path / "run")
    out = expect_ok(*run_ranks(train_clipped, 2, run, timeout=120)[:2], 2)
    records = [r for r in out[0]["records"] if "adv/clipped" in r]
    assert [r["iteration"] for r in records] == [1, 2, 3]  # its runner trained every iteration
    assert any(r["adv/clipped"] > 0 for r in records)
    torch.testing.assert_close(out[0]["params"], out[1]["params"], rtol=0, atol=0)


def test_the_docs_matrix_is_the_one_the_registries_print():
    text = DOC.read_text()
    section = text[text.index("## Two plug-in axes") :]
    block = re.search(r"```\n(.*?)```", section, re.S)
    assert block is not None
    assert block.group(1) == compatibility_matrix(), (
        "docs/architecture.md's matrix is stale; paste what distrl.runner.algorithms."
        "compatibility_matrix() returns"
    )


def test_each_task_is_trained_by_its_algorithm():
    assert algorithm_for(get_task("cartpole")).runner is OnPolicyRunner
    assert algorithm_for(get_task("reach10")).runner is EpisodicRunner


def cfg(task: str = "cartpole", **sections) -> TrainConfig:
    return dataclasses.replace(TrainConfig(task=task), **sections)


@pytest.mark.parametrize(
    "task, sections, message",
    [
        (
            "reach10",
            dict(agent=AgentConfig(total_timesteps=1000)),
            "--agent.total-timesteps does not apply to reach10: its episodic RLOO runner collects "
            "whole episodes of varying length; use --agent.max-iterations",
        ),
        (
            "reach10",
            dict(agent=AgentConfig(target_return=0.9)),
            "--agent.target-return does not apply to reach10: its episodic RLOO runner scores "
            "success over its suite; use --multitask.early-stop-success",
        ),
        (
            "reach10",
            dict(policy=PolicyConfig(reward_normalization=True)),
            "--policy.reward-normalization does not apply to reach10: its episodic RLOO runner "
            "scores whole episodes; leave it off",
        ),
        (
            "reach10",
            dict(policy=PolicyConfig(popart_tasks=10)),
            "--policy.popart-tasks does not apply to reach10: its episodic RLOO runner has no "
            "critic (RLOO's baseline is the group's other episodes); leave it at 0",
        ),
        (
            "cartpole",
            dict(multitask=MultiTaskConfig(tasks=("reach-east",))),
            "--multitask.tasks applies to the episodic suites (reach10, metaworld-mt10), not to "
            "cartpole; drop it, or train a suite: distrl train reach10 --multitask.tasks ...",
        ),
        (
            "cartpole",
            dict(multitask=MultiTaskConfig(noise_beta=1.0)),
            "--multitask.noise-beta applies to the episodic suites (reach10, metaworld-mt10), not "
            "to cartpole; drop it",
        ),
        (
            "cartpole",
            dict(multitask=MultiTaskConfig(group_size=4)),
            "--multitask.group-size applies to the episodic suites (reach10, metaworld-mt10), not "
            "to cartpole; drop it",
        ),
    ],
)
def test_an_option_only_another_algorithm_reads_is_refused_with_its_message(
    task, sections, message
):
    with pytest.raises(ValueError) as e:
        check_compatible(cfg(task, **sections), world_size=1)
    assert str(e.value) == message


def test_every_algorithm_takes_its_own_options_and_every_strategy_its_defaults():
    check_compatible(cfg("cartpole", policy=PolicyConfig(reward_normalization=True)), 1)
    check_compatible(cfg("reach10", multitask=MultiTaskConfig(group_size=4, data_batch_size=8)), 1)
    for strategy in ("allreduce", "ps-bsp", "ps-asp", "ps-bap", "learner-actor"):
        check_compatible(cfg("cartpole", dist=DistConfig(strategy=strategy)), 4)


def test_a_registered_algorithm_is_a_row_of_the_matrix(monkeypatch):
    spec = dataclasses.replace(ALGORITHMS["rloo"], name="RLOO, another", needs=())
    monkeypatch.setitem(ALGORITHMS, "other", spec)
    rows = [
        line for line in compatibility_matrix().splitlines() if line.startswith("RLOO, another")
    ]
    cells = rows[0].removeprefix("RLOO, another").split()
    assert cells == ["yes"] * len(STRATEGIES)  # it needs nothing: every strategy runs it
