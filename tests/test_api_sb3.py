"""The Python API as Stable-Baselines3 users reach for it: callbacks that add to the record and
stop training (``distrl.EvalCallback`` among them), ``distrl.evaluate`` of a run, a file or a
policy, ``result.save`` / ``distrl.load_policy`` of one file, and SB3's keywords answered with
distrl's spelling. The stop itself on several ranks: tests/distributed/test_early_stop.py."""

from __future__ import annotations

import pytest

import distrl
from distrl.telemetry import read_metrics
from tests.helpers import api_train

pytestmark = pytest.mark.timeout(120)


class Extra(distrl.Hooks):
    def on_record(self, runner, record) -> None:
        record["my/iteration_squared"] = runner.iteration**2


def test_a_hook_may_ask_to_stop_from_any_method(tmp_path):
    class Enough(distrl.Hooks):
        def after_update(self, runner, metrics) -> None:
            if runner.iteration == 2:  # the third update (the count advances after it)
                runner.request_stop("enough")

    hooks = [Enough(), Extra()]
    result = api_train("cartpole", tmp_path, agent={"max_iterations": 8}, hooks=hooks)
    assert result.metrics["iteration"] == 3 and result.metrics["stopped"] == "enough"
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert records[-1]["stopped"] == "enough"
    assert [r["my/iteration_squared"] for r in records] == [1, 4, 9]  # on_record: logged too


def test_target_return_is_a_finite_number():
    with pytest.raises(ValueError, match="--agent.target-return must be a finite return"):
        distrl.make_config("cartpole", agent={"target_return": float("nan")})
