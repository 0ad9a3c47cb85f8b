"""Actor-critic MLPs with orthogonal initialization (as in CleanRL / rsl_rl PPO).

Hidden layers use gain sqrt(2), the policy head gain 0.01 (near-uniform initial policy) and the
value head gain 1. Observations pass through a ``RunningNorm`` that lives inside the module, so
the statistics travel with the parameters (broadcast, checkpoint) and rollout and update see the
same normalization within an iteration.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from distrl.config import PolicyConfig
from distrl.envs.core import ActionSpace
from distrl.policy import distributions as D
from distrl.policy import networks
from distrl.policy.normalizer import PopArt, ReturnScale, RunningNorm


class _LinearTanh(torch.autograd.Function):
    """y = tanh(x W^T + b), computed as 2 sigmoid(2 (x W^T + b)) - 1.

    On this CPU build aten::tanh is ~4x slower than sigmoid and was a third of the PPO update.
    The factor 2 is folded into the matmul (addmm with alpha = 2 on a doubled bias), so the
    forward is one addmm and three in-place elementwise ops; the backward is exactly Linear + tanh's
    (tanh_backward, two matmuls, a bias sum; the weight's product transposed, which sums the
    batch in another order for narrow inputs). Agrees with tanh to 2e-7 absolute."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        # 2 * bias up front (exact) rather than beta=2: MKL then skips a scaling pass over the
        # [rows, out] output, 15 % of this forward at 8192 x 64 (bitwise the same result)
        y = torch.addmm(bias * 2.0, x, weight.t(), alpha=2.0).sigmoid_().mul_(2.0).sub_(1.0)
        ctx.save_for_backward(x, weight, y)
        return y

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight, y = ctx.saved_tensors
        g = torch.ops.aten.tanh_backward(grad, y)  # dL/d(xW^T + b) = grad * (1 - y^2)
        grad_x = g @ weight if ctx.needs_input_grad[0] else None
        # dL/dW = g^T x, computed as (x^T g)^T: MKL reduces over the batch far faster in this
        # layout (8192 rows, 1 thread: 12x for 4 inputs, 1.5x for 64; `bench roofline`)
        return grad_x, (x.t() @ g).t(), g.sum(0)


class LinearTanh(nn.Linear):
    """nn.Linear followed by tanh, fused on CPU for large batches (>= 64k outputs, where the
    kernels dominate); small batches and other devices use the native ops (per-op overhead
    dominates there)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type == "cpu" and x.dim() == 2 and x.shape[0] * self.out_features >= 65536:
            return _LinearTanh.apply(x, self.weight, self.bias)
        return torch.tanh(super().forward(x))


_ACTIVATIONS = {"elu": nn.ELU, "relu": nn.ReLU}


def mlp(
    in_dim: int, hidden: tuple[int, ...], out_dim: int, act: str, out_gain: float
) -> nn.Sequential:
    layers: list[nn.Module] = []
    last = in_dim
    for h in hidden:
        lin = LinearTanh(last, h) if act == "tanh" else nn.Linear(last, h)
        nn.init.orthogonal_(lin.weight, math.sqrt(2.0))
        nn.init.zeros_(lin.bias)
        layers += [lin] if act == "tanh" else [lin, _ACTIVATIONS[act]()]
        last = h
    out = nn.Linear(last, out_dim)
    nn.init.orthogonal_(out.weight, out_gain)
    nn.init.zeros_(out.bias)
    layers.append(out)
    return nn.Sequential(*layers)


def _check_shapes(
    name: str, actor: nn.Module, critic: nn.Module, obs_dim: int, action_dim: int, values: int
) -> None:
    """A registered network's outputs for a batch of 2 zero observations: [2, action_dim] from
    the actor, [2, values] from the critic (1, or one per task with PopArt); anything else is
    refused here, naming the shapes, rather than failing deep inside the loss."""
    x = torch.zeros(2, obs_dim)
    with torch.no_grad():
        for role, module, want in (
            ("actor", actor, (2, action_dim)),
            ("critic", critic, (2, values)),
        ):
            try:
                got = tuple(module(x).shape)
            except Exception as e:
                raise ValueError(
                    f"network {name!r}: its {role} failed on observations of shape "
                    f"{tuple(x.shape)}: {type(e).__name__}: {e}"
                ) from e
            if got != want:
                raise ValueError(
                    f"network {name!r}: its {role} maps observations {tuple(x.shape)} to "
                    f"{got}; it must return {want} (see distrl.policy.networks)"
                )


class ActorCritic(nn.Module):
    # Buffers of continuous policies, registered in __init__.
    action_low: torch.Tensor
    action_high: torch.Tensor

    def __init__(self, obs_dim: int, action_space: ActionSpace, cfg: PolicyConfig):
        super().__init__()
        self.action_space = action_space
        self.discrete = action_space.discrete
        self.normalizer = RunningNorm(obs_dim, enabled=cfg.obs_normalization)
        # registered only when used, so policies without it keep their state_dict keys
        self.reward_norm = ReturnScale() if cfg.reward_normalization else None
        self.popart = PopArt(cfg.popart_tasks) if cfg.popart_tasks else None
        if cfg.popart_tasks > obs_dim:
            raise ValueError(
                f"--policy.popart-tasks {cfg.popart_tasks} is wider than the observations "
                f"({obs_dim} entries); set it to the width of their task one-hot (MT10: 10)"
            )
        self.actor, self.critic = networks.build(cfg, obs_dim, action_space.dim, mlp)
        if cfg.network != "mlp":
            values = max(cfg.popart_tasks, 1)
            _check_shapes(cfg.network, self.actor, self.critic, obs_dim, action_space.dim, values)
        if self.popart is not None:
            self.value_head()  # refuses a critic that does not end in a [tasks]-output Linear
        if not self.discrete:
            self.log_std = nn.Parameter(torch.full((action_space.dim,), cfg.init_log_std))
            self.register_buffer("action_low", torch.tensor(action_space.low))
            self.register_buffer("action_high", torch.tensor(action_space.high))

    def value_head(self) -> nn.Linear:
        """The critic's output layer (PopArt rescales it)."""
        linears = [m for m in self.critic.modules() if isinstance(m, nn.Linear)]
        K = max(self.popart.num_tasks if self.popart is not None else 1, 1)
        if not linears or linears[-1].out_features != K:
            raise ValueError(
                f"PopArt (--policy.popart-tasks {K}) rescales the critic's output layer, so the "
                f"critic's last nn.Linear must have {K} outputs; this critic's "
                + (f"has {linears[-1].out_features}" if linears else "has no nn.Linear")
            )
        return linears[-1]

    def _values(self, out: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        """V(s) [N] from the critic's output [N, 1], or [N, tasks] with PopArt (denormalized)."""
        if self.popart is not None:
            return self.popart.denormalize(out, obs)
        return out.squeeze(-1)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """V(s) [N] for raw observations [N, obs_dim]."""
        return self._values(self.critic(self.normalizer(obs)), obs)

    def act(
        self, obs: torch.Tensor, eps: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample (actions, log_prob [N], value [N]) for raw observations. Continuous actions are
        returned unclipped (their log-prob must match); use ``env_action`` before stepping.
        ``eps`` [N, A]: the standard normal draws of a Gaussian policy (default: fresh ones)."""
        x = self.normalizer(obs)
        out = self.actor(x)
        value = self._values(self.critic(x), obs)
        if self.discrete:
            actions, logp = D.categorical_sample(out)
        else:
            actions, logp = D.gaussian_sample(out, self.log_std.expand_as(out), eps)
        return actions, logp, value

    def env_action(self, actions: torch.Tensor) -> torch.Tensor:
        """What the env receives: continuous actions clipped to the action bounds."""
        if self.discrete:
            return actions
        return torch.maximum(torch.minimum(actions, self.action_high), self.action_low)

    def act_deterministic(self, obs: torch.Tensor) -> torch.Tensor:
        out = self.actor(self.normalizer(obs))
        return self.env_action(out.argmax(-1) if self.discrete else out)

    def evaluate(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log_prob [N], entropy [N], value [N]) of given actions under the current policy."""
        x = self.normalizer(obs)
        out = self.actor(x)
        value = self._values(self.critic(x), obs)
        if self.discrete:
            logp, ent = D.categorical_logprob_entropy(out, actions)
        else:
            logp, ent = D.gaussian_logprob_entropy(out, self.log_std.expand_as(out), actions)
        return logp, ent, value
