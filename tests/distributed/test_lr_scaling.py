"""--dist.lr-scaling: the learning rate for a global batch that grows with the collecting
ranks. The rule itself, and under the real launcher: 2 ranks with the sqrt rule train bit for
bit as 2 ranks given the scaled rate by hand, while config.yaml keeps the rate as given (a
`train --config` repeat scales it for its own world)."""

from __future__ import annotations

import math

import pytest
import yaml

from distrl.config import DistConfig, TrainConfig, validate
from tests.distributed.workers import run_cli
from tests.helpers import BIN, assert_same, final_state, tiny_train_args


def with_rule(rule: str) -> TrainConfig:
    return TrainConfig(task="cartpole", dist=DistConfig(lr_scaling=rule))  # type: ignore[arg-type]


def test_the_rules_scale_by_the_collecting_ranks():
    base = with_rule("none").agent.learning_rate
    assert with_rule("none").with_lr_scaling(4).agent.learning_rate == base
    assert with_rule("sqrt").with_lr_scaling(4).agent.learning_rate == base * 2.0
    assert with_rule("linear").with_lr_scaling(4).agent.learning_rate == base * 4
    assert with_rule("sqrt").with_lr_scaling(1).agent.learning_rate == base  # one process
    assert with_rule("sqrt").with_lr_scaling(2).agent.learning_rate == base * math.sqrt(2)


def test_an_unknown_rule_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"--dist.lr-scaling must be none, sqrt or linear"):
        validate(with_rule("cubic"))


@pytest.mark.long
@pytest.mark.timeout(300)
def test_two_ranks_with_the_sqrt_rule_equal_the_scaled_rate_by_hand(tmp_path):
    args = ["--agent.max-iterations", "3", "--agent.lr-schedule", "constant"]
    args += tiny_train_args(16, num_steps=16, num_minibatches=2)
    scaled = repr(1e-3 * math.sqrt(2))
    runs = {
        "rule": ["--agent.learning-rate", "1e-3", "--dist.lr-scaling", "sqrt"],
        "hand": ["--agent.learning-rate", scaled],
    }
    for name, flags in runs.items():
        cmd = [str(BIN / "python"), "-m", "distrl.cli", "train", "cartpole", "--nproc", "2"]
        cmd += [*args, *flags, "--run-dir", str(tmp_path / name)]
        code, out, err, _ = run_cli(cmd, timeout=240)
        assert code == 0, out + err
        if name == "rule":
            assert f"lr: 0.001 x sqrt(2 collecting ranks) = {float(scaled):g}" in out + err
    rule, hand = (final_state(tmp_path / n, 3, 2) for n in runs)
    assert_same(rule["policy"], hand["policy"])
    written = yaml.safe_load((tmp_path / "rule" / "config.yaml").read_text())
    assert written["agent"]["learning_rate"] == 1e-3
