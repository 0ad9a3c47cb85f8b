"""What a run says goes through the ``distrl`` logger: a library user silences it with the
level, or routes it with a handler of their own (distrl then adds none)."""

from __future__ import annotations

import logging

import pytest

import distrl
from distrl import telemetry

SMALL = {"env": {"num_envs": 8}, "agent": {"max_iterations": 2, "num_steps": 8}}


@pytest.fixture
def fresh_logger():
    """The ``distrl`` logger as a new process has it; restored afterwards."""
    log = logging.getLogger("distrl")
    saved = (log.handlers[:], log.level, log.propagate)
    log.handlers.clear()
    log.setLevel(logging.NOTSET)
    log.propagate = True
    yield log
    log.handlers[:], log.level, log.propagate = saved[0], saved[1], saved[2]


def test_a_run_speaks_through_the_distrl_logger(tmp_path, capsys, fresh_logger):
    distrl.train("cartpole", run_dir=str(tmp_path / "a"), progress=False, **SMALL)
    out = capsys.readouterr().out
    assert "distrl: task cartpole (on-policy PPO)" in out and "distrl run summary" in out
    assert fresh_logger.handlers == [telemetry._HANDLER]
    # the KL-adaptive learning rate is not Stable-Baselines3's constant one: the start-up says so
    assert "lr: 0.001 moves with the KL" in out and "--agent.lr-schedule constant keeps it" in out


def test_a_level_silences_it(tmp_path, capsys, fresh_logger):
    fresh_logger.setLevel(logging.WARNING)
    distrl.train("cartpole", run_dir=str(tmp_path / "b"), progress=False, **SMALL)
    assert capsys.readouterr().out == ""


def test_a_handler_of_your_own_routes_it(tmp_path, capsys, fresh_logger):
    got: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            got.append(record.getMessage())

    fresh_logger.addHandler(Collect())
    fresh_logger.setLevel(logging.INFO)
    distrl.train("cartpole", run_dir=str(tmp_path / "c"), progress=False, **SMALL)
    assert any(m.startswith("distrl: task cartpole") for m in got), got
    assert "distrl: task" not in capsys.readouterr().out  # distrl added no handler of its own


def test_the_summary_says_why_there_is_no_final_return(tmp_path, capsys):
    from tests.helpers import run_main, tiny_train_args

    argv = ["train", "cartpole", *tiny_train_args(2, num_steps=4), "--agent.max-iterations", "1"]
    code, out, err = run_main([*argv, "--run-dir", str(tmp_path / "run")], capsys)
    assert code == 0, out + err
    assert "n/a: no episode ended" in out  # 4 steps: no cartpole episode is that short
