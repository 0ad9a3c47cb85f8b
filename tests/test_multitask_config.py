"""The multi-task config subtree and the episodic suites in the registry."""

from __future__ import annotations

import dataclasses
import importlib.util

import pytest

from distrl.args import parse_train_args
from distrl.config import MultiTaskConfig, TrainConfig, from_dict, to_dict, validate
from distrl.envs.registry import get_task, list_tasks


def test_data_batch_size_must_be_a_multiple_of_the_group_size() -> None:
    cfg = TrainConfig(multitask=MultiTaskConfig(data_batch_size=30, group_size=8))
    with pytest.raises(ValueError, match=r"data-batch-size 30 is not a multiple.*use 24 or 32"):
        validate(cfg)
    with pytest.raises(ValueError, match="group-size must be at least 2"):
        validate(TrainConfig(multitask=MultiTaskConfig(group_size=1)))
    with pytest.raises(ValueError, match=r"early-stop-success must be in \(0, 1\]"):
        validate(TrainConfig(multitask=MultiTaskConfig(early_stop_success=1.5)))


def test_multitask_subtree_round_trips_and_parses() -> None:
    cfg = parse_train_args(["reach10", "--multitask.tasks", "reach-east", "reach-west"])
    assert cfg.multitask.tasks == ("reach-east", "reach-west")
    assert get_task("reach10").suite is not None
    assert from_dict(to_dict(cfg)) == cfg


def test_suite_task_selection() -> None:
    suite = get_task("reach10").suite
    assert suite.select(()) == suite.task_names and len(suite.task_names) == 10
    assert suite.select(["reach-west", "reach-east"]) == ("reach-east", "reach-west")
    with pytest.raises(ValueError, match="not in this suite"):
        suite.select(["reach-nowhere"])


def test_metaworld_listed_and_a_clear_error_without_the_extra(monkeypatch) -> None:
    assert "metaworld-mt10" in [t.name for t in list_tasks()]
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "metaworld" else real(n, *a)
    )
    with pytest.raises(ValueError, match=r"pip install -c constraints.txt -e '\.\[metaworld\]'"):
        get_task("metaworld-mt10")


def test_reach10_defaults_are_valid() -> None:
    cfg = validate(get_task("reach10").default_config())
    assert dataclasses.asdict(cfg)["multitask"]["data_batch_size"] % cfg.multitask.group_size == 0
