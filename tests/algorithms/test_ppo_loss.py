"""ppo_loss and adapt_lr with hand-computed numbers."""

from __future__ import annotations

import math

import pytest
import torch

from distrl.algorithms.ppo import adapt_lr, ppo_loss
from distrl.config import AgentConfig

F64 = torch.float64
EPS = 0.2


def t(*xs: float) -> torch.Tensor:
    return torch.tensor(xs, dtype=F64)


def loss_of(
    new_logp: torch.Tensor,
    old_logp: torch.Tensor,
    adv: torch.Tensor,
    *,
    new_v: torch.Tensor | None = None,
    old_v: torch.Tensor | None = None,
    ret: torch.Tensor | None = None,
    ent: torch.Tensor | None = None,
    clip_vloss: bool = True,
    vf_coef: float = 1.0,
    ent_coef: float = 0.0,
):
    z = torch.zeros_like(adv)
    return ppo_loss(
        new_logp,
        old_logp,
        adv,
        z if new_v is None else new_v,
        z if old_v is None else old_v,
        z if ret is None else ret,
        z if ent is None else ent,
        EPS,
        clip_vloss,
        vf_coef,
        ent_coef,
    )


def test_ratio_one() -> None:
    # ratio = 1 everywhere: pg_loss = -mean(A) = -(1 - 2 + 0.5)/3 = 0.5/3
    logp = t(-0.5, -1.0, -2.0)
    loss, s = loss_of(logp, logp.clone(), t(1.0, -2.0, 0.5))
    assert float(s["pg_loss"]) == pytest.approx(0.5 / 3, abs=1e-12)
    assert float(loss.detach()) == pytest.approx(0.5 / 3, abs=1e-12)  # v_loss = 0, ent_coef = 0
    assert float(s["approx_kl"]) == 0.0
    assert float(s["clipfrac"]) == 0.0
    assert float(s["v_loss"]) == 0.0


def grad_wrt_new_logp(old: float, new: float, adv: float) -> tuple[float, float]:
    new_logp = t(new).requires_grad_()
    loss, s = loss_of(new_logp, t(old), t(adv))
    loss.backward()
    return float(s["pg_loss"]), float(new_logp.grad[0])


def test_ratio_above_clip_positive_advantage_is_clipped() -> None:
    # r = 1.5, A = 2: -A r = -3, -A clip(r) = -2 * 1.2 = -2.4 -> max = -2.4 (constant): grad 0
    pg, g = grad_wrt_new_logp(0.0, math.log(1.5), 2.0)
    assert pg == pytest.approx(-2.4, abs=1e-12)
    assert g == 0.0


def test_ratio_above_clip_negative_advantage_is_not_clipped() -> None:
    # r = 1.5, A = -2: -A r = 3, -A clip(r) = 2.4 -> max = 3; d(-A e^logp)/dlogp = -A r = 3
    pg, g = grad_wrt_new_logp(0.0, math.log(1.5), -2.0)
    assert pg == pytest.approx(3.0, abs=1e-12)
    assert g == pytest.approx(3.0, abs=1e-12)


def test_ratio_below_clip_negative_advantage_is_clipped() -> None:
    # r = 0.5, A = -2: -A r = 1.0, -A clip(r) = 2 * 0.8 = 1.6 -> max = 1.6 (constant): grad 0
    pg, g = grad_wrt_new_logp(0.0, math.log(0.5), -2.0)
    assert pg == pytest.approx(1.6, abs=1e-12)
    assert g == 0.0


def test_ratio_below_clip_positive_advantage_is_not_clipped() -> None:
    # r = 0.5, A = 2: -A r = -1.0, -A clip(r) = -1.6 -> max = -1.0; grad = -A r = -1.0
    pg, g = grad_wrt_new_logp(0.0, math.log(0.5), 2.0)
    assert pg == pytest.approx(-1.0, abs=1e-12)
    assert g == pytest.approx(-1.0, abs=1e-12)


def test_inside_clip_range_gradient_is_unclipped() -> None:
    # r = 1.1, A = 2: -2.2 vs -2.2 -> -2.2; grad = -A r = -2.2
    pg, g = grad_wrt_new_logp(0.0, math.log(1.1), 2.0)
    assert pg == pytest.approx(-2.2, abs=1e-12)
    assert g == pytest.approx(-2.2, abs=1e-12)


def test_mixed_batch_clipfrac_and_kl() -> None:
    # ratios [1.0, 1.5, 0.5, 1.1], eps 0.2 -> |r - 1| > 0.2 for 1.5 and 0.5 -> clipfrac 0.5
    ratios = [1.0, 1.5, 0.5, 1.1]
    new = t(*[math.log(r) for r in ratios])
    _, s = loss_of(new, torch.zeros(4, dtype=F64), t(1.0, 1.0, 1.0, 1.0))
    assert float(s["clipfrac"]) == 0.5
    # k3: mean((r - 1) - log r)
    #   r=1: 0 ; 1.5: 0.5 - 0.4054651 ; 0.5: -0.5 + 0.6931472 ; 1.1: 0.1 - 0.0953102
    expected = (0.0 + (0.5 - math.log(1.5)) + (-0.5 + math.log(2.0)) + (0.1 - math.log(1.1))) / 4
    assert float(s["approx_kl"]) == pytest.approx(expected, abs=1e-12)
    # single r = 2: (2 - 1) - log 2 = 0.3068528
    _, s = loss_of(t(math.log(2.0)), t(0.0), t(1.0))
    assert float(s["approx_kl"]) == pytest.approx(1.0 - math.log(2.0), abs=1e-12)


def test_value_clipping_takes_the_max() -> None:
    # old V = 0, new V = 1, eps = 0.2 -> clipped V = 0.2
    #   sample 0, R = 2:   unclipped (1 - 2)^2 = 1,    clipped (0.2 - 2)^2 = 3.24 -> 3.24
    #   sample 1, R = 0.5: unclipped (1 - 0.5)^2 = 0.25, clipped (0.2 - 0.5)^2 = 0.09 -> 0.25
    # v_loss = 0.5 * (3.24 + 0.25) / 2 = 0.8725
    logp = t(0.0, 0.0)
    adv = t(0.0, 0.0)
    new_v = t(1.0, 1.0).requires_grad_()
    loss, s = loss_of(logp, logp, adv, new_v=new_v, old_v=t(0.0, 0.0), ret=t(2.0, 0.5))
    assert float(s["v_loss"]) == pytest.approx(0.8725, abs=1e-12)
    assert float(loss.detach()) == pytest.approx(0.8725, abs=1e-12)  # pg = 0, vf_coef = 1
    loss.backward()
    # sample 0 picked the clipped branch (constant in V): grad 0.
    # sample 1 unclipped: d/dV 0.5 * (V - R)^2 / 2 = (1 - 0.5) / 2 = 0.25
    assert new_v.grad.tolist() == pytest.approx([0.0, 0.25], abs=1e-12)


def test_no_value_clipping_is_half_mse() -> None:
    # 0.5 * mean((1 - 2)^2, (1 - 0.5)^2) = 0.5 * 1.25 / 2 = 0.3125
    logp = t(0.0, 0.0)
    _, s = loss_of(
        logp,
        logp,
        t(0.0, 0.0),
        new_v=t(1.0, 1.0),
        old_v=t(0.0, 0.0),
        ret=t(2.0, 0.5),
        clip_vloss=False,
    )
    assert float(s["v_loss"]) == pytest.approx(0.3125, abs=1e-12)


def test_vf_coef_scales_value_loss() -> None:
    logp = t(0.0, 0.0)
    loss, s = loss_of(
        logp,
        logp,
        t(0.0, 0.0),
        new_v=t(1.0, 1.0),
        ret=t(2.0, 0.5),
        clip_vloss=False,
        vf_coef=0.5,
    )
    assert float(loss.detach()) == pytest.approx(0.5 * 0.3125, abs=1e-12)


def test_entropy_bonus_lowers_the_loss() -> None:
    # loss = pg + vf v - ent_coef mean(H) = 0 + 0 - 0.1 * 1.5 = -0.15
    logp = t(0.0, 0.0)
    ent = t(1.0, 2.0).requires_grad_()
    loss, s = loss_of(logp, logp, t(0.0, 0.0), ent=ent, ent_coef=0.1)
    assert float(loss.detach()) == pytest.approx(-0.15, abs=1e-12)
    assert float(s["entropy"]) == pytest.approx(1.5, abs=1e-12)
    loss.backward()
    # gradient descent on the loss raises the entropy: d loss / d H_i = -0.1 / 2
    assert ent.grad.tolist() == pytest.approx([-0.05, -0.05], abs=1e-12)


def test_stats_are_detached() -> None:
    new = t(0.1, -0.1).requires_grad_()
    _, s = loss_of(new, t(0.0, 0.0), t(1.0, 1.0))
    assert all(not v.requires_grad for v in s.values())
    assert set(s) == {"pg_loss", "v_loss", "entropy", "approx_kl", "clipfrac"}


# ---- adapt_lr --------------------------------------------------------------------------------

CFG = AgentConfig(desired_kl=0.01)  # lr_min 1e-5, lr_max 1e-2


def test_adapt_lr_high_kl_divides() -> None:
    # kl 0.03 > 2 * 0.01: 1e-3 / 1.5
    assert adapt_lr(1e-3, 0.03, CFG) == pytest.approx(1e-3 / 1.5)


def test_adapt_lr_low_kl_multiplies() -> None:
    # 0 < kl 0.004 < 0.5 * 0.01: 1e-3 * 1.5
    assert adapt_lr(1e-3, 0.004, CFG) == pytest.approx(1.5e-3)


@pytest.mark.parametrize("kl", [0.01, 0.02, 0.005, 0.0, -0.001, 0.015])
def test_adapt_lr_band_keeps_lr(kl: float) -> None:
    # in [0.5 desired, 2 desired] (bounds inclusive), and kl <= 0, the lr is unchanged
    assert adapt_lr(1e-3, kl, CFG) == 1e-3


def test_adapt_lr_bounds() -> None:
    assert CFG.lr_min == 1e-5 and CFG.lr_max == 1e-2
    # 1.2e-5 / 1.5 = 8e-6 < lr_min -> 1e-5
    assert adapt_lr(1.2e-5, 1.0, CFG) == 1e-5
    # 8e-3 * 1.5 = 1.2e-2 > lr_max -> 1e-2
    assert adapt_lr(8e-3, 1e-4, CFG) == 1e-2
    # already at the bounds
    assert adapt_lr(1e-5, 1.0, CFG) == 1e-5
    assert adapt_lr(1e-2, 1e-4, CFG) == 1e-2


def test_adapt_lr_uses_desired_kl_from_config() -> None:
    cfg = AgentConfig(desired_kl=0.1)
    assert adapt_lr(1e-3, 0.1, cfg) == 1e-3  # in [0.05, 0.2]
    assert adapt_lr(1e-3, 0.03, cfg) == pytest.approx(1.5e-3)  # < 0.05 (was "high" at 0.01)
    assert adapt_lr(1e-3, 0.3, cfg) == pytest.approx(1e-3 / 1.5)
