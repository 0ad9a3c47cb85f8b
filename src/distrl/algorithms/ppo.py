"""PPO-Clip (Schulman et al. 2017, "Proximal Policy Optimization Algorithms").

The loss is a pure function. The update is pure tensor code too: how gradients are combined
across processes is injected as a ``Reducer`` (sum in place over ranks), so this module never
imports the distributed package and a single process simply uses the identity reducer.

Per minibatch the gradients of every parameter live in one flat buffer (``p.grad`` are views into
it, so backward writes there directly). A few scalars ride in the same buffer, so a single
all-reduce carries everything a decision depends on:

    [ grads ... | approx_kl, nonfinite, pg_loss, v_loss, entropy, clipfrac ]

Every rank then sees identical averaged numbers and takes identical decisions: skip the step if
any rank saw a non-finite value, stop early on the global KL, adapt the LR from the global KL.
"""

from __future__ import annotations

import math
from typing import Protocol

import torch
from torch import nn

from distrl.config import AgentConfig
from distrl.storage.rollout import RolloutBuffer, minibatch_indices


class Reducer(Protocol):
    """Sums a tensor in place over all processes (identity for one process)."""

    world_size: int

    def allreduce_sum_(self, tensor: torch.Tensor) -> None: ...


class LocalReducer:
    world_size = 1

    def allreduce_sum_(self, tensor: torch.Tensor) -> None:
        return None


class NonFiniteError(RuntimeError):
    """Too many consecutive updates had to be skipped because of NaN/Inf."""


def ppo_loss(
    new_logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    new_values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    entropy: torch.Tensor,
    clip_coef: float,
    clip_vloss: bool,
    vf_coef: float,
    ent_coef: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Total loss and its parts (all [N] inputs; returns scalars).

    pg_loss = mean(max(-A r, -A clip(r, 1-eps, 1+eps))),  r = exp(logratio)
    v_loss  = 0.5 mean(max((V - R)^2, (V_old + clip(V - V_old, -eps, eps) - R)^2))  if clipped
    loss    = pg_loss + vf_coef v_loss - ent_coef mean(H)
    approx_kl = mean((r - 1) - logratio)  (Schulman's low-variance k3 estimator)
    """
    logratio = new_logp - old_logp
    ratio = logratio.exp()
    pg_loss = torch.max(
        -advantages * ratio, -advantages * ratio.clamp(1.0 - clip_coef, 1.0 + clip_coef)
    ).mean()
    v_unclipped = (new_values - returns) ** 2
    if clip_vloss:
        v_clipped = old_values + (new_values - old_values).clamp(-clip_coef, clip_coef)
        v_loss = 0.5 * torch.max(v_unclipped, (v_clipped - returns) ** 2).mean()
    else:
        v_loss = 0.5 * v_unclipped.mean()
    ent = entropy.mean()
    loss = pg_loss + vf_coef * v_loss - ent_coef * ent
    with torch.no_grad():
        approx_kl = ((ratio - 1.0) - logratio).mean()
        clipfrac = ((ratio - 1.0).abs() > clip_coef).float().mean()
    stats = {"pg_loss": pg_loss.detach(), "v_loss": v_loss.detach(), "entropy": ent.detach()}
    stats |= {"approx_kl": approx_kl, "clipfrac": clipfrac}
    return loss, stats


def adapt_lr(lr: float, kl: float, cfg: AgentConfig) -> float:
    """rsl_rl's KL-adaptive rule: divide by 1.5 above 2x desired KL, multiply below half."""
    if kl > 2.0 * cfg.desired_kl:
        return max(cfg.lr_min, lr / 1.5)
    if 0.0 < kl < 0.5 * cfg.desired_kl:
        return min(cfg.lr_max, lr * 1.5)
    return lr


_SCALARS = ("approx_kl", "pg_loss", "v_loss", "entropy", "clipfrac", "nonfinite")


class PPO:
    """Owns the optimizer, the flat gradient buffer and the learning-rate state."""

    def __init__(self, policy: nn.Module, cfg: AgentConfig, reducer: Reducer | None = None):
        self.policy, self.cfg = policy, cfg
        self.reducer = reducer or LocalReducer()
        self.params = [p for p in policy.parameters() if p.requires_grad]  # fixed order
        n = sum(p.numel() for p in self.params)
        self.num_grad = n
        device = self.params[0].device
        # Parameters and gradients are views into two flat buffers: backward writes grads in
        # place (no cat before the all-reduce, no copy back after) and Adam steps one tensor
        # instead of one per layer.
        self.flat_param = nn.Parameter(torch.cat([p.detach().reshape(-1) for p in self.params]))
        self.flat = torch.zeros(n + len(_SCALARS), device=device)
        offset = 0
        for p in self.params:
            p.data = self.flat_param.data[offset : offset + p.numel()].view_as(p)
            p.grad = self.flat[offset : offset + p.numel()].view_as(p)
            offset += p.numel()
        self.flat_param.grad = self.flat[:n]
        self.optimizer = torch.optim.Adam([self.flat_param], lr=cfg.learning_rate, eps=cfg.adam_eps)
        self.lr = cfg.learning_rate
        self.skipped_total = 0
        self.consecutive_skips = 0

    # ---- learning-rate state -------------------------------------------------------------
    def set_lr(self, lr: float) -> None:
        self.lr = lr
        for g in self.optimizer.param_groups:
            g["lr"] = lr

    def schedule_lr(self, iteration: int) -> None:
        """Per-iteration schedules (the adaptive one moves per minibatch inside ``update``)."""
        if self.cfg.lr_schedule == "linear":
            frac = 1.0 - iteration / self.cfg.max_iterations
            self.set_lr(self.cfg.learning_rate * frac)

    def state_dict(self) -> dict:
        return {
            "optimizer": self.optimizer.state_dict(),
            "lr": self.lr,
            "skipped_total": self.skipped_total,
        }

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.set_lr(float(state["lr"]))
        self.skipped_total = int(state["skipped_total"])

    # ---- global batch statistics --------------------------------------------------------
    def _global_stats(
        self, buf: RolloutBuffer, extra: torch.Tensor | None = None
    ) -> dict[str, float]:
        """Advantage mean/std and explained variance over the whole global batch: one
        all-reduce of power sums. ``extra`` (float64) rides in the same all-reduce and is
        summed in place, so the caller's per-iteration statistics cost no collective of their
        own."""
        adv, ret, val = buf.advantages, buf.returns, buf.values
        err = ret - val
        sums = torch.stack(
            [
                torch.tensor(float(adv.numel()), device=adv.device),
                adv.sum(),
                (adv * adv).sum(),
                ret.sum(),
                (ret * ret).sum(),
                err.sum(),
                (err * err).sum(),
            ]
        ).double()
        if extra is not None:
            sums = torch.cat([sums, extra.reshape(-1)])
        self.reducer.allreduce_sum_(sums)
        if extra is not None:
            extra.copy_(sums[7:].view_as(extra))
        n, sa, saa, sr, srr, se, see = sums[:7].tolist()
        mean = sa / n
        var = max(saa / n - mean * mean, 0.0) * n / max(n - 1.0, 1.0)  # unbiased, like torch.std
        var_r = srr / n - (sr / n) ** 2
        var_e = see / n - (se / n) ** 2
        ev = float("nan") if var_r <= 0 else 1.0 - var_e / var_r
        return {"adv_mean": mean, "adv_std": math.sqrt(var), "explained_variance": ev}

    # ---- the update ----------------------------------------------------------------------
    def update(
        self,
        buf: RolloutBuffer,
        generator: torch.Generator,
        blocks: int = 1,
        extra: torch.Tensor | None = None,
    ) -> dict[str, float]:
        """One PPO update on the rollout; ``extra`` is summed over ranks on the way (see
        ``_global_stats``)."""
        cfg, W = self.cfg, self.reducer.world_size
        stats = self._global_stats(buf, extra)
        data = buf.flat()
        if cfg.norm_adv:
            data.advantages = (data.advantages - stats["adv_mean"]) / (stats["adv_std"] + 1e-8)
        n = self.num_grad
        sums = dict.fromkeys(("pg_loss", "v_loss", "entropy", "clipfrac", "approx_kl"), 0.0)
        steps = skipped = 0
        stopped_early = False
        for _epoch in range(cfg.num_epochs):
            for idx in minibatch_indices(
                buf.num_steps, buf.num_envs, cfg.num_minibatches, generator, blocks
            ):
                mb = data.index(idx.to(self.flat.device, non_blocking=True))
                new_logp, entropy, new_values = self.policy.evaluate(mb.obs, mb.actions)
                loss, parts = ppo_loss(
                    new_logp,
                    mb.logprobs,
                    mb.advantages,
                    new_values,
                    mb.values,
                    mb.returns,
                    entropy,
                    cfg.clip_coef,
                    cfg.clip_vloss,
                    cfg.vf_coef,
                    cfg.ent_coef,
                )
                self.flat.zero_()
                loss.backward()
                scalars = self.flat[n:]
                scalars[:5] = torch.stack([parts[k] for k in _SCALARS[:5]])
                scalars[5] = torch.logical_not(
                    torch.isfinite(self.flat[:n]).all() & torch.isfinite(loss)
                )
                self.reducer.allreduce_sum_(self.flat)  # the one collective per minibatch
                if W > 1:
                    self.flat.div_(W)
                kl, pg, vl, ent, cf, nonfinite = scalars.tolist()  # one host sync
                if nonfinite > 0:  # every rank sees the same sum: all skip together
                    skipped += 1
                    self.skipped_total += 1
                    self.consecutive_skips += 1
                    if self.consecutive_skips >= cfg.max_consecutive_skips:
                        raise NonFiniteError(
                            f"{self.consecutive_skips} consecutive updates skipped for NaN/Inf "
                            f"loss or gradients (limit --agent.max-consecutive-skips="
                            f"{cfg.max_consecutive_skips}); lower the learning rate or check "
                            f"the environment's rewards"
                        )
                    continue
                self.consecutive_skips = 0
                if cfg.target_kl is not None and kl > cfg.target_kl:
                    stopped_early = True  # SB3 rule: do not take the step that crossed it
                    break
                if cfg.lr_schedule == "adaptive":
                    self.set_lr(adapt_lr(self.lr, kl, cfg))
                g = self.flat[:n]
                norm = g.norm()
                g.mul_((cfg.max_grad_norm / (norm + 1e-6)).clamp_max(1.0))
                self.optimizer.step()
                steps += 1
                for k, v in (
                    ("approx_kl", kl),
                    ("pg_loss", pg),
                    ("v_loss", vl),
                    ("entropy", ent),
                    ("clipfrac", cf),
                ):
                    sums[k] += v
            if stopped_early:
                break
        denom = max(steps, 1)
        return {
            "loss/policy": sums["pg_loss"] / denom,
            "loss/value": sums["v_loss"] / denom,
            "loss/entropy": sums["entropy"] / denom,
            "approx_kl": sums["approx_kl"] / denom,
            "clipfrac": sums["clipfrac"] / denom,
            "explained_variance": stats["explained_variance"],
            "lr": self.lr,
            "train/updates": steps,
            "train/skipped_updates": skipped,
            "train/early_stop": float(stopped_early),
        }
