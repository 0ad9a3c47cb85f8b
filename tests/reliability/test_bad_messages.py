"""A peer's malformed message drops that peer by name; the run goes on (ps-asp, learner-actor),
and ranks of different installs are refused at setup naming them.

The coordinator (parameter server, learner) reads every header through
``peers.read_checked``: an unknown kind, a sender other than the peer it came from, a part
outside ``0 <= part < parts``, a length outside the message's capacity, a negative count or a
version ahead of the coordinator (ASP's staleness LR divided by zero on it) drops the peer; so
does a rollout whose discrete action is not an index of the action space. Through the real
launcher, with a hook that sends one bad message (tests/fixtures/bad_messages.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from distrl.distributed.messages import ActorHeader, WorkerHeader, frame
from distrl.distributed.peers import read_checked
from distrl.distributed.transport import install_mismatch
from tests.distributed.workers import run_cli
from tests.helpers import BIN

KINDS = (1, 2, 3, 4)


def worker_msg(**change) -> torch.Tensor:
    fields = dict(sender=2, version=3, iteration=1, samples=8, part=0, parts=1, nsums=0)
    fields |= change
    length = fields.pop("length", 1)
    head = WorkerHeader(fields.pop("kind", 2), **fields, length=length)
    msg = torch.zeros(WorkerHeader.size() + 16)
    msg[: WorkerHeader.size()] = head.words()
    return msg


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"kind": 99}, "unknown kind 99"),
        ({"sender": 1}, "claiming to come from rank 1"),
        ({"parts": 0}, "part 0 of 0"),
        ({"part": 2, "parts": 2}, "part 2 of 2"),
        ({"length": -3}, "payload length of -3"),
        ({"length": 17}, "payload length of 17 words (0..16 fit)"),
        ({"samples": -1}, "negative samples"),
    ],
)
def test_a_malformed_header_is_named(change, why):
    head, problem = read_checked(WorkerHeader, worker_msg(**change), 2, 16, KINDS)
    assert head is None and why in problem


def test_a_well_formed_header_is_read_and_an_unreadable_one_named():
    head, problem = read_checked(WorkerHeader, worker_msg(), 2, 16, KINDS)
    assert problem is None and head is not None and head.version == 3
    msg = frame(ActorHeader(1, 2, 0, 0, 0.0, 0, 1, 1), torch.zeros(1), 4)
    msg[2] = float("nan")  # the version word
    assert "unreadable header" in read_checked(ActorHeader, msg, 2, 4, KINDS)[1]


def test_different_installs_are_named_by_rank():
    same = {"distrl version": "0.1.0", "message layout": {"A": ["kind"]}, "policy shapes": []}
    other = dict(same, **{"distrl version": "0.2.0"})
    assert install_mismatch([same, same, same]) is None
    problem = install_mismatch([same, same, other])
    assert problem is not None and "ranks [2]" in problem and "distrl version" in problem


FLAGS = ["--env.num-envs", "16", "--agent.num-steps", "16", "--agent.max-iterations", "6"]
FLAGS += ["--threads", "1", "--progress", "False", "--tensorboard", "False"]
FLAGS += ["--dist.timeout", "5"]  # how soon the dropped rank learns it and leaves


@pytest.mark.slow
@pytest.mark.long  # the rules are make test's (above); these two launches are CI's
@pytest.mark.timeout(200)
@pytest.mark.parametrize(
    ("strategy", "rule", "why"),
    [
        ("ps-asp", "version", "version 10000, ahead of the parameter server's"),
        ("learner-actor", "action", "an action -1.0 outside 0..1"),
    ],
)
def test_a_bad_message_drops_its_sender_and_the_run_goes_on(tmp_path: Path, strategy, rule, why):
    run = tmp_path / "run"
    cmd = [str(BIN / "distrl"), "train", "--import", "tests.fixtures.bad_messages"]
    cmd += ["bad-message-cartpole", "--nproc", "3", "--dist.strategy", strategy, *FLAGS]
    cmd += ["--run-dir", str(run)]
    env = {"DISTRL_TEST_BAD_KIND": rule, "DISTRL_TEST_BAD_RANK": "2"}
    code, out, err, _ = run_cli(cmd, timeout=180, cwd=Path(__file__).parents[2], **env)
    assert code == 0, out[-3000:] + err[-3000:]
    text = out + err
    who = "worker rank 2" if strategy == "ps-asp" else "actor rank 2"
    assert f"dropped {who}" in text and why in text, text[-3000:]
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["iteration"] == 6
