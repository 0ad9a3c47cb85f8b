"""The peer protocol fuzzed: thousands of random messages (headers of random words, some near
the valid ranges, random payloads) reach a coordinator from its peers, and whatever they hold
the coordinator never fails on them: each is acted on only when every rule holds, or its sender
is dropped by name; the codecs' checks pass only what their decoders can store. Seeded, so a
failure replays."""

from __future__ import annotations

import math

import pytest
import torch

from distrl.distributed.liveness import PeerFailure
from distrl.distributed.messages import WorkerHeader
from distrl.distributed.peers import Coordinator, read_checked
from distrl.storage.rollout import WINDOW
from distrl.storage.transition_codec import TransitionCodec
from tests.reliability.test_bad_messages import FedInbox

KINDS = (1, 2, 3, 4)
CAPACITY = 16
FIELDS = len(WorkerHeader.__dataclass_fields__)


def random_message(g: torch.Generator, peer: int) -> torch.Tensor:
    """A message of WorkerHeader's size: each header word valid-looking, off by a little, or
    random (NaN and Inf among them), then random payload words."""
    valid = [2.0, float(peer), 3.0, 1.0, 8.0, 0.0, 1.0, 0.0, 0.0, 4.0]  # kind..length
    head = torch.tensor(valid[:FIELDS] + [0.0] * max(0, FIELDS - len(valid)))
    for i in range(FIELDS):
        roll = float(torch.rand((), generator=g))
        if roll < 0.15:
            head[i] += float(torch.randint(-3, 4, (), generator=g))
        elif roll < 0.2:
            choices = [math.nan, math.inf, -math.inf, 1e30, -1e30, 0.5, 2.0**31]
            head[i] = choices[int(torch.randint(len(choices), (), generator=g))]
    payload = torch.randn(CAPACITY, generator=g) * 10
    return torch.cat([head, payload])


@pytest.mark.parametrize(
    "seed, turns",
    [(0, 300), *(pytest.param(s, 3000, marks=pytest.mark.long) for s in (11, 12, 13))],
)
def test_random_messages_never_break_a_coordinator(seed, turns):
    """make test: 300 fresh coordinators of seed 0; make test-long: 3000 of three more seeds."""
    g = torch.Generator().manual_seed(seed)
    acted = dropped = 0
    for _ in range(turns):  # fresh coordinators: every drop also ends its peer's turn
        inbox = FedInbox()
        c = Coordinator(
            title="parameter server", noun="worker", peers=[1, 2], header=WorkerHeader,
            kinds=KINDS, done_kind=4, capacity=CAPACITY, group_of=lambda p: None,
            timeout=60.0, version=lambda: 5, inbox=inbox,  # type: ignore[arg-type]
        )  # fmt: skip
        try:
            for _ in range(8):
                peer = 1 + int(torch.randint(2, (), generator=g))
                inbox.queue.put((peer, random_message(g, peer)))
                msg = c.receive(0.01)
                if msg is None:
                    continue
                acted += 1
                head = msg.header
                assert head.kind in KINDS and head.sender == msg.peer and head.version <= 5
                assert 0 <= head.part < head.parts and 0 <= head.length <= CAPACITY
        except PeerFailure as e:  # both peers dropped: the run ends naming them
            assert "lost every worker" in str(e)
        for peer, why in c.dropped.items():
            assert peer not in c.live and why.startswith("the parameter server dropped it")
            dropped += 1
    assert acted > 50 and dropped > 50, (acted, dropped)  # both paths were taken


def test_read_checked_names_every_random_header_it_refuses():
    g = torch.Generator().manual_seed(1)
    for _ in range(3000):
        msg = random_message(g, 1)
        head, why = read_checked(WorkerHeader, msg, 1, CAPACITY, KINDS)
        assert (head is None) != (why is None)
        assert why is None or len(why) > 5


def test_a_transition_message_passing_its_check_always_decodes_into_valid_rows():
    codec = TransitionCodec(8, 3, torch.float32, (), torch.long, 4, True, 4, 2)
    window = torch.full((WINDOW, 3), -1.0)
    good = codec.encode(
        {
            "obs": torch.zeros(5, 3),
            "actions": torch.tensor([0, 1, 2, 3, 0]),
            "rewards": torch.ones(5),
            "next_obs": torch.zeros(5, 3),
            "terminated": torch.tensor([False, True, False, False, True]),
            "discount": torch.full((5,), 0.9),
        },
        window,
    )
    g = torch.Generator().manual_seed(2)
    passed = 0
    for _ in range(2000):
        msg = good.clone()
        k = int(torch.randint(1, 4, (), generator=g))
        idx = torch.randint(msg.numel(), (k,), generator=g)
        msg[idx] = torch.tensor(
            [[0.0, 1.0, -1.0, 4.0, 8.0, 9.0, 0.5, math.nan][int(i)] for i in
             torch.randint(8, (k,), generator=g)]
        )  # fmt: skip
        if codec.problem(msg) is not None:
            continue
        passed += 1
        rows, _ = codec.decode(msg, "cpu")
        n = codec.count(msg)
        assert all(v.shape[0] == n for v in rows.values())
        assert bool(((rows["actions"] >= 0) & (rows["actions"] < 4)).all())
        assert bool(((rows["discount"] >= 0) & (rows["discount"] <= 1)).all())
    assert passed > 100
