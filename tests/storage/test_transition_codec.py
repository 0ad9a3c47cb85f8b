"""An Ape-X actor's message: the replay rows of its iteration, whatever their number, through one
fixed-size payload and back, uint8 images as their bytes; a message a learner cannot store is
named, not stored."""

from __future__ import annotations

import torch

from distrl.storage.rollout import WINDOW
from distrl.storage.transition_codec import TransitionCodec


def rows(n: int, obs_dim: int, dtype: torch.dtype, discount: bool = False) -> dict:
    g = torch.Generator().manual_seed(n)
    obs = (torch.rand(n, obs_dim, generator=g) * 255).to(dtype)
    out = {
        "obs": obs,
        "actions": torch.randint(0, 3, (n,), generator=g),
        "rewards": torch.randn(n, generator=g),
        "next_obs": obs.flip(0),
        "terminated": torch.rand(n, generator=g) < 0.3,
    }
    if discount:
        out["discount"] = torch.rand(n, generator=g)
    return out


def codec(dtype: torch.dtype = torch.float32, discount: bool = False) -> TransitionCodec:
    return TransitionCodec(12, 5, dtype, (), torch.long, 3, discount, num_steps=4, num_envs=2)


def test_rows_come_back_as_they_went_whatever_their_number():
    window = torch.arange(WINDOW * 3, dtype=torch.float32).view(WINDOW, 3)
    for dtype in (torch.float32, torch.uint8):
        for discount in (False, True):
            c = codec(dtype, discount)
            for n in (0, 5, 12):
                sent = rows(n, 5, dtype, discount)
                payload = c.encode(sent, window)
                assert payload.numel() == c.numel and c.problem(payload) is None
                got, w = c.decode(payload, "cpu")
                assert torch.equal(w, window)
                assert got.keys() == sent.keys()
                for k in sent:
                    assert got[k].dtype == sent[k].dtype, k
                    assert torch.equal(got[k], sent[k]), (k, dtype, n)


def test_images_travel_as_their_bytes():
    assert codec(torch.uint8).numel < codec(torch.float32).numel


def test_a_message_a_learner_cannot_store_is_named():
    c = codec(discount=True)
    window = torch.full((WINDOW, 3), -1.0)
    good = c.encode(rows(4, 5, torch.float32, True), window)
    bad = good.clone()
    bad[0] = 13
    assert "transition count of 13" in str(c.problem(bad))
    bad = good.clone()
    bad[c.offset("actions") + 1] = 3
    assert "action 3.0 outside 0..2" in str(c.problem(bad))
    bad = good.clone()
    bad[c.offset("terminated")] = 0.5
    assert "terminated flag" in str(c.problem(bad))
    bad = good.clone()
    bad[c.offset("discount") + 2] = 1.5
    assert "discount outside" in str(c.problem(bad))
    bad = good.clone()
    bad[c.offset("actions") + 6] = 7  # past the count: padding, never read
    assert c.problem(bad) is None


def test_a_pqn_actors_rows_carry_their_truncations_and_a_bad_flag_is_named():
    c = TransitionCodec(12, 5, torch.float32, (), torch.long, 3, truncation=True, num_steps=4,
                        num_envs=3)  # fmt: skip
    sent = rows(12, 5, torch.float32)
    sent["truncated"] = torch.arange(12) % 5 == 0
    payload = c.encode(sent, torch.full((WINDOW, 3), -1.0))
    got, _ = c.decode(payload, "cpu")
    assert got.keys() == sent.keys() and torch.equal(got["truncated"], sent["truncated"])
    payload[c.offset("truncated") + 1] = 2.0
    assert "truncated flag that is neither 0 nor 1" in str(c.problem(payload))
