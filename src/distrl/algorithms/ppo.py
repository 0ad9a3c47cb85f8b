"""PPO-Clip (Schulman et al. 2017, "Proximal Policy Optimization Algorithms").

Pure tensor code: the loss, the per-minibatch gradient, the decisions taken from it and the
optimizer step. How one minibatch's gradient is combined across processes is injected as a
``GradientStep`` (a strategy, see ``distrl.distributed.base``); one process uses ``LocalStep``.

Per minibatch the gradients of every parameter live in one flat buffer (``p.grad`` are views into
it, so backward writes there directly). The scalars that decisions depend on ride at its tail, so
whatever combines the gradients combines them too, in the same message:

    [ grads ... | approx_kl, pg_loss, v_loss, entropy, clipfrac, nonfinite ]

``PPO.decide`` reads the combined tail once (one host sync) and says what to do: skip the step if
any rank saw a non-finite value, stop the epochs on the target KL, otherwise adapt the LR from
the KL and step. Identical combined numbers give identical decisions on every rank.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

import torch
from torch import nn

from distrl.algorithms.adam import FlatAdam
from distrl.config import AgentConfig
from distrl.storage.rollout import Batch, RolloutBuffer

if TYPE_CHECKING:
    from distrl.policy.actor_critic import ActorCritic


@dataclass(frozen=True)
class Decision:
    """What one minibatch's combined gradient led to."""

    action: Literal["step", "skip", "stop"]
    stats: tuple[float, ...] = ()
    """(approx_kl, pg_loss, v_loss, entropy, clipfrac) of a step taken; empty otherwise."""


DECISION_METRICS = ("approx_kl", "loss/policy", "loss/value", "loss/entropy", "clipfrac")
"""The metric name of each of ``Decision.stats``, in order: every learner that steps (the
local update, a parameter server) reports them under these names."""


def decision_metrics(sums: Sequence[float], steps: int) -> dict[str, float]:
    """Each decision statistic's mean over the ``steps`` taken, by metric name."""
    denom = max(steps, 1)
    return {k: v / denom for k, v in zip(DECISION_METRICS, sums, strict=True)}


class Optimizer(Protocol):
    """What a strategy reads of a learner's optimizer: its groups' settings (the LR a step
    takes) and its state's tensors (broadcast at setup)."""

    @property
    def param_groups(self) -> list[dict[str, Any]]: ...

    @property
    def state(self) -> dict[int, dict[str, torch.Tensor]]: ...


class GradientLearner(Protocol):
    """What a strategy needs from the algorithm to combine, decide and step."""

    num_grad: int
    flat: torch.Tensor
    """[num_grad + scalars]: this minibatch's gradients and decision scalars."""

    @property
    def flat_param(self) -> torch.Tensor:
        """Every trained parameter as one flat vector (the parameters are views into it)."""
        ...

    @property
    def params(self) -> list[nn.Parameter]:
        """The trained parameters, in the order of ``flat_param``."""
        ...

    @property
    def lr(self) -> float:
        """The learning rate the next step takes (adaptive or scheduled)."""
        ...

    @property
    def optimizer(self) -> Optimizer: ...

    def decide(self, flat: torch.Tensor) -> Decision: ...

    def apply(self) -> None: ...


class GradientStep(Protocol):
    """Turns one minibatch's local ``flat`` into new parameters (a strategy implements it)."""

    def step(self, learner: GradientLearner, flat: torch.Tensor) -> Decision: ...


def decide_and_step(
    learner: GradientLearner, flat: torch.Tensor, lr_scale: float = 1.0
) -> Decision:
    """The one "decide, then step" of every strategy: the learner decides from the combined
    ``flat`` (skip on NaN/Inf, early stop on KL, adaptive LR) and, on "step", clips and steps.
    ``lr_scale`` shrinks this one step only (ASP's staleness-aware LR), leaving the LR state
    untouched."""
    decision = learner.decide(flat)
    if decision.action != "step":
        return decision
    if lr_scale == 1.0:
        learner.apply()
        return decision
    groups = learner.optimizer.param_groups
    for g in groups:
        g["lr"] = learner.lr * lr_scale
    learner.apply()
    for g in groups:
        g["lr"] = learner.lr
    return decision


class LocalStep:
    """One process: the local gradient is the combined gradient."""

    def step(self, learner: GradientLearner, flat: torch.Tensor) -> Decision:
        return decide_and_step(learner, flat)


class NonFiniteError(RuntimeError):
    """Too many consecutive updates had to be skipped because of NaN/Inf."""


def all_finite(t: torch.Tensor) -> torch.Tensor:
    """Whether every element of ``t`` is finite, as a 0-d bool tensor: ``isfinite(t).all()``
    read through the largest magnitude, which is NaN or inf exactly when some element is. One
    reduction, no [n] bool tensor: a 220k-parameter buffer's check falls from 0.9 ms to 0.1 ms
    on one CPU core (docs/benchmarks.md)."""
    if t.numel() == 0:
        return torch.ones((), dtype=torch.bool, device=t.device)
    return torch.isfinite(t.abs().amax())


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

    def __init__(self, policy: ActorCritic, cfg: AgentConfig):
        self.policy, self.cfg = policy, cfg
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
        self.grads_finite: Callable[[], torch.Tensor] | None = None
        """Set by a strategy that sums the gradient buffer while backward runs
        (``--dist.overlap``): whether this rank's gradients were finite, checked before they
        went out; the buffer itself is then not to be read until the strategy's step."""
        self.optimizer = FlatAdam(self.flat_param, lr=cfg.learning_rate, eps=cfg.adam_eps)
        self.lr = cfg.learning_rate
        self._loss = torch.compile(self._forward) if cfg.compile else self._forward
        images_on_gpu = device.type == "cuda" and policy.encoder is not None
        self.bf16 = cfg.precision == "bf16" or (cfg.precision == "auto" and images_on_gpu)
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

    # ---- batch statistics -----------------------------------------------------------------
    @staticmethod
    def batch_sums(buf: RolloutBuffer) -> torch.Tensor:
        """Power sums of this rank's rollout, float64 [7]: (count, sum A, sum A^2, sum R,
        sum R^2, sum (R - V), sum (R - V)^2). Summed over ranks they give the global batch's
        advantage mean/std and explained variance (``batch_stats``)."""
        adv, ret, val = buf.advantages, buf.returns, buf.values
        err = ret - val
        return torch.stack(
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

    @staticmethod
    def batch_stats(sums: torch.Tensor) -> dict[str, float]:
        """Advantage mean/std (unbiased, like torch.std) and explained variance from the power
        sums of ``batch_sums``, added up over every rank that learns."""
        n, sa, saa, sr, srr, se, see = sums.tolist()
        mean = sa / n
        var = max(saa / n - mean * mean, 0.0) * n / max(n - 1.0, 1.0)
        var_r = srr / n - (sr / n) ** 2
        var_e = see / n - (se / n) ** 2
        ev = float("nan") if var_r <= 0 else 1.0 - var_e / var_r
        return {"adv_mean": mean, "adv_std": math.sqrt(var), "explained_variance": ev}

    # ---- one minibatch -------------------------------------------------------------------
    def gradient(self, mb: Batch, memory: torch.Tensor | None = None) -> torch.Tensor:
        """Loss and backward for one minibatch; returns ``flat`` = [grads | scalars].
        ``memory``: a recurrent policy's memory at its sequences' first step. The forward
        runs compiled with ``--agent.compile`` and in bfloat16 autocast where
        ``--agent.precision`` says so (the backward follows it; gradients stay float32)."""
        with torch.autocast(self.flat.device.type, torch.bfloat16, enabled=self.bf16):
            loss, parts = self._loss(mb, memory)
        return self.backward(loss, parts)

    def _forward(
        self, mb: Batch, memory: torch.Tensor | None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The PPO loss of one minibatch and its parts (what ``--agent.compile`` compiles)."""
        cfg = self.cfg
        new_logp, entropy, new_values = self.policy.evaluate(mb.obs, mb.actions, memory, mb.starts)
        old_values, returns = mb.values, mb.returns
        popart = self.policy.popart
        if popart is not None:  # the value loss in each task's normalized units
            new_values, old_values, returns = (
                popart.normalize(v, mb.obs) for v in (new_values, old_values, returns)
            )
        loss, parts = ppo_loss(
            new_logp,
            mb.logprobs,
            mb.advantages,
            new_values,
            old_values,
            returns,
            entropy,
            cfg.clip_coef,
            cfg.clip_vloss,
            cfg.vf_coef,
            cfg.ent_coef,
        )
        return loss.float(), parts

    def backward(self, loss: torch.Tensor, parts: dict[str, torch.Tensor]) -> torch.Tensor:
        """Backward of any loss on the policy into ``flat``; ``parts`` holds the decision
        scalars (``approx_kl``, ``pg_loss``, ``v_loss``, ``entropy``, ``clipfrac``), and the
        non-finite flag is set here. Returns ``flat`` = [grads | scalars]."""
        n = self.num_grad
        self.flat.zero_()
        loss.backward()
        scalars = self.flat[n:]
        scalars[:5] = torch.stack([parts[k] for k in _SCALARS[:5]])
        finite = self.grads_finite() if self.grads_finite else all_finite(self.flat[:n])
        scalars[5] = torch.logical_not(finite & torch.isfinite(loss))
        return self.flat

    def decide(self, flat: torch.Tensor) -> Decision:
        """What to do with a combined ``flat``: skip on a non-finite flag, stop on the target
        KL (SB3's rule: the step that crossed it is not taken), else adapt the LR and step."""
        cfg = self.cfg
        kl, pg, vl, ent, cf, nonfinite = flat[self.num_grad :].tolist()  # one host sync
        if nonfinite > 0:  # a sum over ranks: every rank that sees it skips together
            self.skipped_total += 1
            self.consecutive_skips += 1
            if self.consecutive_skips >= cfg.max_consecutive_skips:
                raise NonFiniteError(
                    f"{self.consecutive_skips} consecutive updates skipped for NaN/Inf "
                    f"loss or gradients (limit --agent.max-consecutive-skips="
                    f"{cfg.max_consecutive_skips}); lower the learning rate or check "
                    f"the environment's rewards"
                )
            return Decision("skip")
        self.consecutive_skips = 0
        if cfg.target_kl is not None and kl > cfg.target_kl:
            return Decision("stop")
        if cfg.lr_schedule == "adaptive":
            self.set_lr(adapt_lr(self.lr, kl, cfg))
        return Decision("step", (kl, pg, vl, ent, cf))

    def apply(self) -> None:
        """Clip the combined gradient's global norm and take the optimizer step."""
        g = self.flat[: self.num_grad]
        norm = g.norm()
        g.mul_((self.cfg.max_grad_norm / (norm + 1e-6)).clamp_max(1.0))
        self.optimizer.step()

    # ---- the update ----------------------------------------------------------------------
    def update(
        self,
        buf: RolloutBuffer,
        stats: dict[str, float],
        shuffle: Callable[[], list[torch.Tensor]],
        stepper: GradientStep | None = None,
    ) -> dict[str, float]:
        """One PPO update on the rollout.

        ``stats``: the global batch statistics (``batch_stats``); advantages are normalized with
        the whole global batch's mean/std when ``norm_adv``. ``shuffle()``: one epoch's
        minibatch indices into the flat [T*N] batch. ``stepper``: how each minibatch's gradient
        becomes new parameters (``LocalStep`` for one process)."""
        data = buf.flat()
        if self.cfg.norm_adv:
            data.advantages = (data.advantages - stats["adv_mean"]) / (stats["adv_std"] + 1e-8)
        dev = self.flat.device
        T = buf.num_steps

        def gradient(idx: torch.Tensor) -> torch.Tensor:
            idx = idx.to(dev, non_blocking=True)
            if not self.policy.recurrent:
                return self.gradient(data.index(idx))
            # whole sequences, time-major: the first len/T indices are the envs
            return self.gradient(data.index(idx), buf.memory.index_select(0, idx[: len(idx) // T]))

        out = self.epochs(shuffle, gradient, stepper)
        out["explained_variance"] = stats["explained_variance"]
        return out

    def accumulated(
        self, gradient: Callable[[torch.Tensor], torch.Tensor], chunks: int, idx: torch.Tensor
    ) -> torch.Tensor:
        """``gradient(idx)`` computed in ``chunks`` parts of ``idx`` (``--agent.grad-accum``):
        each part's backward in turn, ``flat`` = their mean weighted by their rows (every part's
        loss is a mean over its rows), so the decision scalars average too and a non-finite part
        leaves its flag above 0. The update equals the whole minibatch's to float rounding."""
        total = torch.zeros_like(self.flat)
        for part in idx.chunk(chunks):
            total.add_(gradient(part), alpha=len(part) / len(idx))
        self.flat.copy_(total)
        return self.flat

    def epochs(
        self,
        shuffle: Callable[[], list[torch.Tensor]],
        gradient: Callable[[torch.Tensor], torch.Tensor],
        stepper: GradientStep | None = None,
    ) -> dict[str, float]:
        """``num_epochs`` passes: per minibatch of ``shuffle()``, ``gradient(idx)`` -> ``flat``,
        then ``stepper.step`` combines, decides and steps; stops every rank on the (global) KL.
        Any loss fits: PPO's own (``update``) or another objective's through ``backward``."""
        cfg, stepper = self.cfg, stepper or LocalStep()
        if cfg.grad_accum > 1:
            gradient = functools.partial(self.accumulated, gradient, cfg.grad_accum)
        sums = dict.fromkeys(_SCALARS[:5], 0.0)
        steps = skipped = 0
        stopped_early = False
        for _epoch in range(cfg.num_epochs):
            for idx in shuffle():
                decision = stepper.step(self, gradient(idx))
                if decision.action == "skip":
                    skipped += 1
                    continue
                if decision.action == "stop":
                    stopped_early = True
                    break
                steps += 1
                for k, v in zip(_SCALARS[:5], decision.stats, strict=True):
                    sums[k] += v
            if stopped_early:
                break
        return {
            **decision_metrics([sums[k] for k in _SCALARS[:5]], steps),
            "lr": self.lr,
            "train/updates": steps,
            "train/skipped_updates": skipped,
            "train/early_stop": float(stopped_early),
        }
