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
from distrl.distributed.peers import Coordinator, read_checked
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
        ({"signal": 7}, "a signal field of 7"),
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


# ---- the coordinator side of the peer layer, fed by hand (no process group) -------------------


class FedInbox:
    """An ``Inbox`` whose messages the test puts in."""

    def __init__(self) -> None:
        import queue

        self.queue: queue.Queue = queue.Queue()

    def get(self, timeout: float):
        import queue

        try:
            return self.queue.get(timeout=max(timeout, 0.0))
        except queue.Empty:
            return None


def coordinator(capacity: int = 8, **kw) -> tuple[Coordinator, FedInbox]:
    inbox = FedInbox()
    c = Coordinator(
        title="parameter server",
        noun="worker",
        peers=[1, 2],
        header=WorkerHeader,
        kinds=KINDS,
        done_kind=4,
        capacity=capacity,
        group_of=lambda peer: None,
        timeout=60.0,
        version=lambda: 5,
        inbox=inbox,  # type: ignore[arg-type]
        **kw,
    )
    return c, inbox


def part(sender: int, part: int, parts: int, payload: torch.Tensor, kind: int = 3) -> torch.Tensor:
    head = WorkerHeader(
        kind, sender=sender, version=0, iteration=1, samples=0, part=part, parts=parts, nsums=0,
        length=payload.numel(),
    )  # fmt: skip
    return frame(head, payload, 8)


def test_parts_are_joined_in_order_and_one_out_of_order_drops_its_sender():
    c, inbox = coordinator()
    a, b = torch.arange(8.0), torch.arange(8.0, 11.0)
    inbox.queue.put((1, part(1, 0, 2, a)))
    assert c.receive(0.1) is None  # the first part is held
    inbox.queue.put((1, part(1, 1, 2, b)))
    msg = c.receive(0.1)
    assert msg is not None and torch.equal(msg.payload, torch.cat([a, b]))
    inbox.queue.put((2, part(2, 1, 2, b)))  # its part 1 before its part 0
    assert c.receive(0.1) is None
    assert c.live == {1} and "part 1 of 2 (kind 3) where part 0" in c.dropped[2]
    assert "parameter server: dropped worker rank 2" in c.messages[0]


def test_a_message_of_more_parts_than_fit_drops_its_sender_before_it_is_held():
    c, inbox = coordinator(max_words=16)  # 8 words a part: 3 parts would be 24 words
    inbox.queue.put((2, part(2, 0, 3, torch.zeros(8))))
    assert c.receive(0.1) is None and 2 not in c.live
    assert "3 parts, over 16 words" in c.dropped[2] and c.parts[2] == []


def test_a_scheme_check_and_a_version_ahead_drop_the_sender_and_the_last_one_ends_the_run():
    from distrl.distributed.liveness import PeerFailure

    c, inbox = coordinator(check=lambda head, payload: "a wrong size" if payload.numel() else None)
    inbox.queue.put((1, part(1, 0, 1, torch.zeros(2))))
    assert c.receive(0.1) is None and "it sent a wrong size" in c.dropped[1]
    head = WorkerHeader(2, sender=2, version=9, iteration=1, samples=0, part=0, parts=1,
                        nsums=0, length=0)  # fmt: skip
    inbox.queue.put((2, frame(head, torch.zeros(0), 8)))
    with pytest.raises(PeerFailure, match="lost every worker"):
        c.receive(0.1)
    assert "version 9, ahead of the parameter server's 5" in c.dropped[2]


def test_a_statistics_row_of_another_layout_drops_its_sender_not_the_server():
    """Under ps-bsp the server adds the round's rows together: a row of another size would fail
    that sum (and the run) instead of naming the worker that sent it."""
    from types import SimpleNamespace

    from distrl.distributed.base import StatsLayout
    from distrl.distributed.ps_server import PSServer

    layout = StatsLayout((("batch", (3,)),), (("window", (2,)),))  # 3 sums, 5 words a row
    server = SimpleNamespace(num_grad=4, layout=layout, sinks={})
    head = lambda nsums: WorkerHeader(  # noqa: E731
        1, sender=1, version=0, iteration=1, samples=0, part=0, parts=1, nsums=nsums, length=0
    )
    assert PSServer._check(server, head(3), torch.zeros(10)) is None  # type: ignore[arg-type]
    why = PSServer._check(server, head(3), torch.zeros(12))  # type: ignore[arg-type]
    assert why == "statistics of 3 sums in 12 words, not 3 in 10"
    assert PSServer._check(server, head(2), torch.zeros(10)) is not None  # type: ignore[arg-type]


def test_a_sink_nodes_stacked_rows_of_other_ranks_or_sizes_drop_the_sink():
    """A sink's statistics are its workers' rows after their ranks: rows of ranks that are not
    its workers, repeated, out of order or of another size drop it by name."""
    from types import SimpleNamespace

    from distrl.distributed.base import StatsLayout
    from distrl.distributed.ps_server import PSServer
    from distrl.distributed.ps_sink import stack_rows
    from distrl.distributed.transport import pack64

    layout = StatsLayout((("batch", (3,)),), (("window", (2,)),))  # 3 sums, 5 words a row
    server = SimpleNamespace(num_grad=4, layout=layout, sinks={3: [4, 5]})
    server._rows = lambda *a: PSServer._rows(server, *a)  # type: ignore[arg-type]
    head = WorkerHeader(
        1, sender=3, version=0, iteration=1, samples=0, part=0, parts=1, nsums=3, length=0
    )
    row = torch.arange(5, dtype=torch.float64)

    def check(payload: torch.Tensor) -> str | None:
        return PSServer._check(server, head, pack64(payload))  # type: ignore[arg-type]

    assert check(stack_rows({4: row, 5: row + 1})) is None
    rows, _ = PSServer._rows(server, 3, 3, pack64(stack_rows({5: row})))  # type: ignore[arg-type]
    assert list(rows) == [5] and torch.equal(rows[5], row)
    assert "not of its workers [4, 5]" in str(check(stack_rows({4: row, 6: row})))
    assert "not of its workers" in str(check(torch.cat([torch.tensor([5.0, 4.0]), row, row])))
    assert "not of its workers" in str(check(torch.cat([torch.tensor([4.0, 4.0]), row, row])))
    assert "not rows of 5 under a rank" in str(check(torch.cat([torch.tensor([4.0]), row, row])))
