"""What the off-policy learners (``dqn.py``, ``pqn.py``, ``sac.py``, ``td3.py``) share: their
trained parameters as views of one flat vector and their gradients as views of one flat buffer
with the decision scalars at its tail, so that a strategy combines one minibatch's gradients
*and* its losses in one collective, exactly as for PPO:

    [ grads of group 1 | grads of group 2 | ... | scalar 1, ..., nonfinite ]

One Adam per parameter group (``FlatAdam`` on the group's slice): TD3 steps its actor every
``policy_delay`` critic steps, and an Adam that stepped on a zero gradient would still move the
actor by its momentum. ``decide`` skips a step that any rank saw a non-finite value in (as PPO
does); ``apply`` clips the combined gradient's norm (``--agent.max-grad-norm``; inf: never),
steps the groups that are due and moves the target networks. Every rank decides from the same
combined numbers, so the replicas stay identical without a parameter broadcast.

A learner is a ``GradientLearner`` (``algorithms/ppo.py``): ``allreduce`` and ``elastic`` run
it through the same ``strategy.step`` as PPO.
"""

from __future__ import annotations

import copy
import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch import nn

from distrl.algorithms.adam import FlatAdam
from distrl.algorithms.ppo import Decision, NonFiniteError, all_finite
from distrl.config import TrainConfig
from distrl.policy.actor_critic import ActorCritic, mlp


class GroupedAdam:
    """One ``FlatAdam`` per parameter group, seen by a strategy as one optimizer."""

    def __init__(self, adams: dict[str, FlatAdam]):
        self.adams = adams

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return [g for a in self.adams.values() for g in a.param_groups]

    @property
    def state(self) -> dict[int, dict[str, torch.Tensor]]:
        states = [s for a in self.adams.values() for s in a.state.values()]
        return dict(enumerate(states))

    def state_dict(self) -> dict[str, Any]:
        return {name: a.state_dict() for name, a in self.adams.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if set(state) != set(self.adams):
            raise ValueError(
                f"the checkpoint's optimizers are {sorted(state)}, this learner's "
                f"{sorted(self.adams)}: resume with the saved run's --algorithm"
            )
        for name, a in self.adams.items():
            a.load_state_dict(state[name])


M = TypeVar("M", bound=nn.Module)


def frozen_copy(module: M) -> M:
    """A target network: a copy that is never trained."""
    target = copy.deepcopy(module)
    target.requires_grad_(False)
    return target


@torch.no_grad()
def polyak(target: nn.Module, source: nn.Module, tau: float) -> None:
    """target <- (1 - tau) target + tau source, parameters and buffers (tau 1: a copy)."""
    for t, s in zip(target.parameters(), source.parameters(), strict=True):
        if tau < 1.0:
            t.lerp_(s, tau)
        else:
            t.copy_(s)
    for b, c in zip(target.buffers(), source.buffers(), strict=True):
        b.copy_(c)


class TwinQ(nn.Module):
    """Two critics Q(s, a) of (features, unit action) rows (clipped double Q)."""

    def __init__(self, features: int, action_dim: int, hidden: tuple[int, ...], act: str):
        super().__init__()
        self.q1 = mlp(features + action_dim, hidden, 1, act, 1.0)
        self.q2 = mlp(features + action_dim, hidden, 1, act, 1.0)

    def forward(self, x: torch.Tensor, unit: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        xa = torch.cat([x, unit], dim=-1)
        return self.q1(xa).squeeze(-1), self.q2(xa).squeeze(-1)


class OffPolicyLearner(ABC):
    """The flat gradient buffer, the groups' optimizers, the decision, the target moves."""

    SCALARS: tuple[str, ...]
    """The metric name of each decision scalar ``loss`` returns, in order."""
    replay: bool = True
    """Learns from a replay buffer (PQN: from each rollout instead)."""
    transitions = True
    """Under learner-actor its actors send transition rows (``storage/transition_codec.py``),
    not PPO's rollouts."""
    td_abs: torch.Tensor | None = None
    """|TD error| [B] of the last minibatch whose ``loss`` read importance-sampling
    ``weights`` (a prioritized replay's): its rows' new priorities."""

    def __init__(
        self,
        policy: ActorCritic,
        cfg: TrainConfig,
        modules: dict[str, nn.Module],
        groups: dict[str, list[nn.Parameter]],
    ):
        self.policy, self.cfg, self.o = policy, cfg, cfg.offpolicy
        self.module = nn.ModuleDict({"policy": policy, **modules})
        """Every network this learner holds (the replicas strategy.setup makes identical)."""
        self.extra = nn.ModuleDict(modules)
        """What a checkpoint holds besides the policy: critics, targets, the temperature."""
        self.group_names = list(groups)
        self.params = [p for ps in groups.values() for p in ps]
        n = sum(p.numel() for p in self.params)
        self.num_grad = n
        device = self.params[0].device
        self.flat_param = nn.Parameter(torch.cat([p.detach().reshape(-1) for p in self.params]))
        self.flat = torch.zeros(n + len(self.SCALARS) + 1, device=device)
        self.grads_finite: Callable[[], torch.Tensor] | None = None
        """As ``PPO.grads_finite`` (``--dist.overlap``)."""
        offset, adams = 0, {}
        for name, ps in groups.items():
            start = offset
            for p in ps:
                p.data = self.flat_param.data[offset : offset + p.numel()].view_as(p)
                p.grad = self.flat[offset : offset + p.numel()].view_as(p)
                offset += p.numel()
            view = self.flat_param.data[start:offset]
            view.grad = self.flat[start:offset]
            adams[name] = FlatAdam(view, lr=cfg.agent.learning_rate, eps=cfg.agent.adam_eps)
        self.optimizer = GroupedAdam(adams)
        self.lr = cfg.agent.learning_rate
        self.updates = 0
        """Steps taken (the same on every rank): TD3's delay and the target interval count it."""
        self.skipped_total = 0
        self.consecutive_skips = 0

    # ---- the algorithm -------------------------------------------------------------------
    @abstractmethod
    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """The minibatch's loss (every group's part, each only on its own parameters) and the
        decision scalars (``SCALARS``)."""

    @abstractmethod
    def explore(
        self, obs: torch.Tensor, progress: float, uniform: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(the env's actions, the actions the replay stores) for raw observations while
        collecting; ``progress``: the run's fraction of env steps done (exploration schedules);
        ``uniform``: act at random (before --offpolicy.learning-starts)."""

    def due(self, group: str) -> bool:
        """Whether ``group`` steps at this update (TD3: its actor every policy_delay)."""
        return True

    def move_targets(self) -> None:  # noqa: B027 (PQN has no target network)
        """After a step: the target networks' move, when due."""

    def metrics(self) -> dict[str, float]:
        """The learner's own figures for the iteration's record."""
        return {}

    # ---- one minibatch -------------------------------------------------------------------
    def gradient(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Loss and backward into ``flat``; returns ``flat`` = [grads | scalars | nonfinite]."""
        n = self.num_grad
        self.flat.zero_()
        loss, scalars = self.loss(batch)
        loss.backward()
        tail = self.flat[n:]
        tail[:-1] = torch.stack([s.detach().float() for s in scalars])
        finite = self.grads_finite() if self.grads_finite else all_finite(self.flat[:n])
        tail[-1] = torch.logical_not(finite & torch.isfinite(loss))
        return self.flat

    def decide(self, flat: torch.Tensor) -> Decision:
        """Skip on a non-finite flag (every rank sees the same sum), else step."""
        *stats, nonfinite = flat[self.num_grad :].tolist()  # one host sync
        if nonfinite > 0:
            self.skipped_total += 1
            self.consecutive_skips += 1
            limit = self.cfg.agent.max_consecutive_skips
            if self.consecutive_skips >= limit:
                raise NonFiniteError(
                    f"{self.consecutive_skips} consecutive updates skipped for NaN/Inf loss or "
                    f"gradients (limit --agent.max-consecutive-skips={limit}); lower the "
                    f"learning rate or check the environment's rewards"
                )
            return Decision("skip")
        self.consecutive_skips = 0
        return Decision("step", tuple(stats))

    def apply(self) -> None:
        """Clip the combined gradient's norm, step the groups that are due, move the targets."""
        g = self.flat[: self.num_grad]
        limit = self.cfg.agent.max_grad_norm
        if math.isfinite(limit):
            g.mul_((limit / (g.norm() + 1e-6)).clamp_max(1.0))
        for name, adam in self.optimizer.adams.items():
            if self.due(name):
                adam.step()
        self.updates += 1
        self.move_targets()

    # ---- learning rate ---------------------------------------------------------------------
    def set_lr(self, lr: float) -> None:
        self.lr = lr
        for g in self.optimizer.param_groups:
            g["lr"] = lr

    def schedule_lr(self, iteration: int) -> None:
        a = self.cfg.agent
        if a.lr_schedule == "linear":
            self.set_lr(a.learning_rate * (1.0 - iteration / a.max_iterations))

    # ---- checkpoints -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "networks": self.extra.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "lr": self.lr,
            "updates": self.updates,
            "skipped_total": self.skipped_total,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.extra.load_state_dict(state["networks"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.set_lr(float(state["lr"]))
        self.updates = int(state["updates"])
        self.skipped_total = int(state["skipped_total"])


def bootstrap_discount(batch: dict[str, torch.Tensor], gamma: float) -> torch.Tensor | float:
    """The discount of each row's bootstrap: gamma^m of n-step rows (their ``discount``), else
    gamma (one-step rows carry none, and the one-step arithmetic stays as it was)."""
    return batch.get("discount", gamma)


def twin_q_loss(
    learner: OffPolicyLearner, q1: torch.Tensor, q2: torch.Tensor, y: torch.Tensor,
    batch: dict[str, torch.Tensor],
) -> torch.Tensor:  # fmt: skip
    """SAC's and TD3's critic loss, each critic's mean squared error to ``y``. With a
    prioritized replay's ``weights`` each row's error is weighted by its importance-sampling
    weight, and the mean of the two critics' |TD error| becomes its priority
    (``learner.td_abs``); the actor and the temperature see the drawn rows unweighted."""
    e1, e2 = (q1 - y).pow(2), (q2 - y).pow(2)
    if "weights" not in batch:
        return e1.mean() + e2.mean()
    learner.td_abs = (0.5 * ((q1 - y).abs() + (q2 - y).abs())).detach()
    return (batch["weights"] * e1).mean() + (batch["weights"] * e2).mean()


def epsilon(cfg: TrainConfig, progress: float) -> float:
    """The epsilon-greedy rate at ``progress`` (fraction of the run's env steps)."""
    o = cfg.offpolicy
    frac = min(progress / o.eps_fraction, 1.0) if o.eps_fraction > 0 else 1.0
    return o.eps_start + frac * (o.eps_end - o.eps_start)


def epsilon_greedy(q: torch.Tensor, eps: float) -> torch.Tensor:
    """Greedy actions of Q-values [N, A], each replaced by a uniform one with probability eps."""
    greedy = q.argmax(-1)
    if eps <= 0.0:
        return greedy
    explore = torch.rand(q.shape[0], device=q.device) < eps
    uniform = torch.randint(q.shape[-1], (q.shape[0],), device=q.device)
    return torch.where(explore, uniform, greedy)
