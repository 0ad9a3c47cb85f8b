"""The episodic RLOO objective (algorithms/rloo.py) with hand-computed numbers."""

from __future__ import annotations

import math

import pytest
import torch

from distrl.algorithms.rloo import (
    episode_advantages,
    rloo_advantages,
    rloo_policy_loss,
    uniform_groups,
)
from distrl.storage.episodes import step_mask

F64 = torch.float64


def t(*xs: float) -> torch.Tensor:
    return torch.tensor(xs, dtype=F64)


def test_episode_advantages_two_groups_of_four() -> None:
    # group 0 [1, 0, 0, 1]: total 2, A_i = R_i - (2 - R_i)/3 -> 2/3, -2/3, -2/3, 2/3
    # group 1 [1, 1, 1, 1]: A_i = 1 - 3/3 = 0
    adv = episode_advantages(t(1, 0, 0, 1, 1, 1, 1, 1), group_size=4)
    torch.testing.assert_close(adv, t(2 / 3, -2 / 3, -2 / 3, 2 / 3, 0, 0, 0, 0))


def test_episode_advantages_pairs() -> None:
    # K = 2: A_i = R_i - R_other
    torch.testing.assert_close(episode_advantages(t(1, 0, 0.5, 2), 2), t(1, -1, -1.5, 1.5))


def test_groups_must_divide_the_batch() -> None:
    with pytest.raises(ValueError, match="multiple of the RLOO group size"):
        episode_advantages(t(1, 0, 1), 2)
    with pytest.raises(ValueError, match="at least 2"):
        episode_advantages(t(1, 0, 1), 1)


def test_uniform_groups() -> None:
    got = uniform_groups(t(1, 1, 0, 1, 0, 0, 0.5, 0.5), 2)
    assert got.tolist() == [True, False, True, True]


def test_step_mask() -> None:
    m = step_mask(torch.tensor([3, 1, 2]), 3)
    assert m.tolist() == [[True, True, True], [True, False, False], [True, True, False]]


def test_advantages_spread_over_steps_and_padding_masked() -> None:
    # rewards [1, 0 | 1, 1]: group 0 -> [1, -1]; group 1 -> [0, 0]
    out = rloo_advantages(t(1, 0, 1, 1), torch.tensor([2, 3, 1, 3]), 3, group_size=2)
    expected = t(1, 1, 0, -1, -1, -1, 0, 0, 0, 0, 0, 0).reshape(4, 3)
    torch.testing.assert_close(out.advantages, expected)
    assert out.mask.tolist() == [
        [True, True, False],
        [True, True, True],
        [True, False, False],
        [True, True, True],
    ]
    assert out.num_dropped_groups == 0
    assert out.kept.all()


def test_dynamic_sampling_drops_uniform_groups() -> None:
    # groups: [1, 0] kept; [1, 1] dropped; [0, 0] dropped
    out = rloo_advantages(
        t(1, 0, 1, 1, 0, 0), torch.tensor([1, 2, 2, 2, 2, 1]), 2, group_size=2, drop_uniform=True
    )
    assert out.num_dropped_groups == 2
    assert out.kept.tolist() == [True, True, False, False, False, False]
    assert out.mask.tolist() == [[True, False], [True, True], *[[False, False]] * 4]
    torch.testing.assert_close(out.advantages[:2], t(1, 0, -1, -1).reshape(2, 2))
    assert float(out.advantages[2:].abs().sum()) == 0.0


def test_policy_loss_masked_mean_and_clip() -> None:
    # valid steps: (0,0) r=1.5, A=1 -> max(-1.5, -1.2) = -1.2   (clipped at 1 + 0.2)
    #              (0,1) r=0.5, A=1 -> max(-0.5, -0.8) = -0.5   (below 1 - 0.2 but A > 0: unclipped)
    #              (1,0) r=1.1, A=-2 -> max(2.2, 2.2) = 2.2
    # pg_loss = (-1.2 - 0.5 + 2.2) / 3; padded steps hold NaN/inf and must not matter.
    nan, inf = float("nan"), float("inf")
    new_logp = torch.tensor(
        [[math.log(1.5), math.log(0.5), nan], [math.log(1.1), inf, nan]], dtype=F64
    ).requires_grad_()
    old_logp = torch.zeros(2, 3, dtype=F64)
    adv = t(1, 1, nan, -2, nan, nan).reshape(2, 3)
    mask = torch.tensor([[True, True, False], [True, False, False]])
    loss, s = rloo_policy_loss(new_logp, old_logp, adv, mask, clip_coef=0.2)
    assert float(loss.detach()) == pytest.approx(0.5 / 3, abs=1e-12)
    assert float(s["pg_loss"]) == pytest.approx(0.5 / 3, abs=1e-12)
    assert float(s["clipfrac"]) == pytest.approx(2 / 3, abs=1e-6)  # float32 in ppo_loss
    kl = ((0.5 - math.log(1.5)) + (-0.5 - math.log(0.5)) + (0.1 - math.log(1.1))) / 3
    assert float(s["approx_kl"]) == pytest.approx(kl, abs=1e-12)
    assert float(s["valid_steps"]) == 3
    assert "v_loss" not in s
    loss.backward()
    # d/dlogp of -A r over 3 steps: clipped step 0; (0,1): -1 * 0.5 / 3; (1,0): 2 * 1.1 / 3
    expected = t(0, -0.5 / 3, 0, 2.2 / 3, 0, 0).reshape(2, 3)
    torch.testing.assert_close(new_logp.grad, expected)


def test_policy_loss_entropy_bonus() -> None:
    # ratio 1, A = [1, 3] on the valid steps: pg = -2; entropy mean over valid = (1 + 3)/2
    logp = torch.zeros(2, 2, dtype=F64)
    mask = torch.tensor([[True, False], [True, False]])
    adv = t(1, 9, 3, 9).reshape(2, 2)
    ent = t(1, 100, 3, 100).reshape(2, 2)
    loss, s = rloo_policy_loss(logp, logp, adv, mask, 0.2, entropy=ent, ent_coef=0.1)
    assert float(loss) == pytest.approx(-2.0 - 0.1 * 2.0, abs=1e-12)
    assert float(s["entropy"]) == pytest.approx(2.0, abs=1e-12)


def test_policy_loss_with_no_valid_step_is_a_connected_zero() -> None:
    new_logp = torch.full((2, 3), float("nan"), dtype=F64, requires_grad=True)
    mask = torch.zeros(2, 3, dtype=torch.bool)
    loss, s = rloo_policy_loss(new_logp, torch.zeros(2, 3, dtype=F64), new_logp.detach(), mask, 0.2)
    assert float(loss.detach()) == 0.0
    assert float(s["valid_steps"]) == 0
    loss.backward()
    assert torch.equal(new_logp.grad, torch.zeros(2, 3, dtype=F64))


def test_equal_episodes_gives_each_kept_episode_the_same_total_weight() -> None:
    # groups: [1, 0] (lengths 2, 6) kept; [1, 1] dropped. Kept mean length 4: the success's
    # steps carry 1 * 4/2, the failure's -1 * 4/6; each episode's steps sum to +-4 (not 2 vs
    # -6 as with the mean over steps), and the kept steps' mean |weight| stays 1.
    lengths = torch.tensor([2, 6, 3, 1])
    out = rloo_advantages(t(1, 0, 1, 1), lengths, 6, 2, drop_uniform=True, equal_episodes=True)
    per_episode = out.advantages.sum(dim=1)
    torch.testing.assert_close(per_episode, t(4, -4, 0, 0))
    assert out.mask.sum() == 8
    torch.testing.assert_close(out.advantages[out.mask].abs().mean(), t(1)[0])
    torch.testing.assert_close(out.episode_advantages, t(1, -1, 0, 0))
    plain = rloo_advantages(t(1, 0, 1, 1), lengths, 6, 2, drop_uniform=True)
    torch.testing.assert_close(plain.advantages.sum(dim=1), t(2, -6, 0, 0))
    assert out.mask.tolist() == plain.mask.tolist()
    # every group dropped: nothing kept, nothing scaled (no division by an empty mean)
    none = rloo_advantages(t(1, 1), torch.tensor([2, 3]), 3, 2, True, equal_episodes=True)
    assert float(none.advantages.abs().sum()) == 0.0 and not none.mask.any()
