"""The message codec: headers are named records that survive the float32 wire exactly (integers
below 2**24) or rounded to float32 (floats), and a payload is read back by its length."""

from __future__ import annotations

import pytest
import torch

from distrl.distributed.messages import (
    ActorHeader,
    LearnerHeader,
    ServerHeader,
    WorkerHeader,
    frame,
)


def test_a_worker_message_round_trips_by_name():
    payload = torch.arange(5, dtype=torch.float32)
    head = WorkerHeader(
        2, sender=3, version=2**24 - 1, iteration=7, samples=256, part=0, parts=1, nsums=4, length=5
    )
    msg = frame(head, payload, capacity=16)
    assert msg.shape == (WorkerHeader.size() + 16,)
    assert WorkerHeader.read(msg) == head
    assert torch.equal(WorkerHeader.payload(msg), payload)


def test_server_floats_are_rounded_to_float32_and_stats_keep_decision_order():
    stats = dict(approx_kl=0.1, pg_loss=-0.2, v_loss=0.3, entropy=0.4, clipfrac=0.5)
    head = ServerHeader(1, version=4, action=2, **stats, part=0, parts=1, length=0)
    back = ServerHeader.read(frame(head, torch.zeros(0), capacity=4))
    assert back.action == 2 and isinstance(back.version, int)
    f32 = lambda x: float(torch.tensor(x, dtype=torch.float32))  # noqa: E731
    assert back.stats == tuple(f32(x) for x in (0.1, -0.2, 0.3, 0.4, 0.5))


def test_actor_and_learner_headers_have_the_sizes_the_receivers_post():
    assert ActorHeader.size() == 9 and LearnerHeader.size() == 5
    head = LearnerHeader(3, version=9, failed=1)
    assert LearnerHeader.read(head.words()) == head


def test_the_interrupt_fields_round_trip_before_the_length():
    """``signal`` (keyword-only, default 0) and ``stop`` sit before ``length``, which stays
    last: old positional calls keep their meaning and ``payload`` still finds the length."""
    head = ActorHeader(1, 2, 0, 4, 0.5, 0, 1, 3, signal=15)
    msg = frame(head, torch.zeros(3), capacity=8)
    assert ActorHeader.read(msg) == head and ActorHeader.payload(msg).numel() == 3
    weights = LearnerHeader(1, version=4, failed=-1, stop=1)
    assert LearnerHeader.read(weights.words()).stop == 1


def test_a_length_that_does_not_match_the_payload_is_refused():
    head = ActorHeader(1, sender=1, version=0, iteration=0, seconds=0.5, part=0, parts=1, length=3)
    with pytest.raises(ValueError, match="payload's length 2"):
        frame(head, torch.zeros(2), capacity=8)
