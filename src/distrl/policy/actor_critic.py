"""The actor-critic policy: MLPs with orthogonal initialization (as in CleanRL / rsl_rl PPO),
or a network's encoder for images (``policy/encoders.py``), optionally a recurrent core.

Hidden layers use gain sqrt(2), the policy head gain 0.01 (near-uniform initial policy) and the
value head gain 1. Observations pass through a ``RunningNorm`` that lives inside the module, so
the statistics travel with the parameters (broadcast, checkpoint) and rollout and update see the
same normalization within an iteration.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import torch
from torch import nn

from distrl.config import PolicyConfig
from distrl.envs.core import ActionSpace, ObsLayout, VecEnv
from distrl.policy import distributions as D
from distrl.policy import networks
from distrl.policy.encoders import Recurrent
from distrl.policy.groups import PerGroup, group_index
from distrl.policy.heads import HEADS, SquashedGaussian, Tanh
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
    kernels dominate); small batches, other devices and autocast use the native ops (per-op
    overhead dominates there; autocast casts only native ops)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        big = x.dim() == 2 and x.shape[0] * self.out_features >= 65536
        if x.device.type == "cpu" and big and not torch.is_autocast_enabled("cpu"):
            return _LinearTanh.apply(x, self.weight, self.bias)
        return torch.tanh(super().forward(x))


_ACTIVATIONS = {"elu": nn.ELU, "relu": nn.ReLU, "tanh": nn.Tanh}


def mlp(
    in_dim: int,
    hidden: tuple[int, ...],
    out_dim: int,
    act: str,
    out_gain: float,
    layer_norm: bool = False,
) -> nn.Sequential:
    """Linear layers with ``act`` between them (``layer_norm``: a LayerNorm before each)."""
    layers: list[nn.Module] = []
    last = in_dim
    for h in hidden:
        fused = act == "tanh" and not layer_norm
        lin = LinearTanh(last, h) if fused else nn.Linear(last, h)
        nn.init.orthogonal_(lin.weight, math.sqrt(2.0))
        nn.init.zeros_(lin.bias)
        if fused:
            layers.append(lin)
        else:
            norm: list[nn.Module] = [nn.LayerNorm(h)] if layer_norm else []
            layers += [lin, *norm, _ACTIVATIONS[act]()]
        last = h
    out = nn.Linear(last, out_dim)
    nn.init.orthogonal_(out.weight, out_gain)
    nn.init.zeros_(out.bias)
    layers.append(out)
    return nn.Sequential(*layers)


def _probe(
    name: str, role: str, module: nn.Module, x: torch.Tensor, want: tuple | None, what: str
) -> int:
    """Run a registered network's piece on a batch of 2 zero inputs; refuse a failure or an
    output that is not ``want`` (or, ``want`` None, not [2, F]) naming the shapes, rather than
    failing deep inside the loss. Returns the output width."""
    with torch.no_grad():
        try:
            got = tuple(module(x).shape)
        except Exception as e:
            raise ValueError(
                f"network {name!r}: its {role} failed on {what} of shape {tuple(x.shape)} "
                f"({x.dtype}): {type(e).__name__}: {e}"
            ) from e
    if (want is not None and got != want) or (want is None and (len(got) != 2 or got[0] != 2)):
        raise ValueError(
            f"network {name!r}: its {role} maps {what} {tuple(x.shape)} to {got}; it must "
            f"return {want or '[2, features]'} (see distrl.policy.networks)"
        )
    return got[-1]


def _check_per_group(cfg: PolicyConfig, groups: int, encoder: bool) -> None:
    """Refuse ``--policy.mapping per-group`` where it cannot route rows to groups."""
    if groups < 2:
        raise ValueError(
            "--policy.mapping per-group gives each group of agents its own policy, but this "
            "task's agents form one group (a multi-agent task whose agent names differ before "
            "their _<number>, or one registered with groups=); use --policy.mapping shared"
        )
    if encoder or cfg.recurrent != "none":
        raise ValueError(
            "--policy.mapping per-group routes rows by their group's one-hot, which an encoder "
            "or a recurrent core would hide: use an MLP network without --policy.recurrent"
        )
    if cfg.popart_tasks or cfg.head != "default":
        raise ValueError(
            "--policy.mapping per-group is built for ppo, rloo, pqn and dqn (not with PopArt, "
            "nor sac's or td3's critics, which are one network)"
        )


class ActorCritic(nn.Module):
    """The policy: observation rows -> (normalizer | encoder) -> [recurrent core] -> actor and
    critic heads.

    ``obs_shape``/``obs_dtype``: one observation's shape and the rows' element type (the env's;
    uint8 images go to the network's encoder as they are and skip the running normalizer). With
    ``--policy.recurrent`` the methods take the memory ([N, slots, H], ``initial_memory``):
    ``act`` advances it in place; ``evaluate`` replays whole sequences from their first memory,
    zeroing it where ``starts`` marks an episode's first step."""

    # Buffers of continuous policies, registered in __init__.
    action_low: torch.Tensor
    action_high: torch.Tensor

    def __init__(
        self,
        obs_dim: int,
        action_space: ActionSpace,
        cfg: PolicyConfig,
        obs_shape: tuple[int, ...] | None = None,
        obs_dtype: torch.dtype = torch.float32,
        groups: int = 0,
    ):
        super().__init__()
        # agent groups (multi-agent envs): each row starts with its group's one-hot, this wide
        self.groups = groups if groups > 1 else 0
        per_group = cfg.mapping == "per-group"
        self.obs_dim, self.obs_dtype = obs_dim, obs_dtype
        # an ObsLayout (rows of several parts) stays one: the encoder reads its fields
        self.obs_shape = (
            obs_shape if isinstance(obs_shape, ObsLayout) else tuple(obs_shape or (obs_dim,))
        )
        if math.prod(self.obs_shape) != obs_dim:
            raise ValueError(f"observation shape {self.obs_shape} does not hold {obs_dim} entries")
        self.action_space = action_space
        self.discrete = action_space.discrete
        self.categorical = action_space.categorical  # discrete or multi_discrete
        self.nvec = action_space.nvec  # multi_discrete: each choice's size (its logits)
        # the legal-action mask's width at the end of each raw observation row (0: none)
        self.mask_size = action_space.n if action_space.discrete and action_space.mask_in_obs else 0
        self.encoder = networks.build_encoder(cfg, self.obs_shape)
        if per_group:
            _check_per_group(cfg, self.groups, self.encoder is not None)
        normalize = cfg.obs_normalization and self.encoder is None
        self.normalizer = RunningNorm(
            obs_dim if self.encoder is None else 0, enabled=normalize, raw=self.groups
        )
        # registered only when used, so policies without it keep their state_dict keys
        self.reward_norm = ReturnScale() if cfg.reward_normalization else None
        self.popart = PopArt(cfg.popart_tasks) if cfg.popart_tasks else None
        if cfg.popart_tasks > obs_dim:
            raise ValueError(
                f"--policy.popart-tasks {cfg.popart_tasks} is wider than the observations "
                f"({obs_dim} entries); set it to the width of their task one-hot (MT10: 10)"
            )
        features = obs_dim
        if self.encoder is not None:
            probe = torch.zeros(2, obs_dim, dtype=obs_dtype)
            features = _probe(cfg.network, "encoder", self.encoder, probe, None, "observations")
        self.core = (
            Recurrent(cfg.recurrent, features, cfg.recurrent_hidden)
            if cfg.recurrent != "none"
            else None
        )
        if self.core is not None:
            features = self.core.out_features
        head = HEADS[cfg.head] if cfg.head != "default" else None
        if head is not None and (self.categorical or cfg.network != "mlp"):
            raise ValueError(
                f"--policy.head {cfg.head} is for continuous actions and the mlp network "
                f"(this env's actions are {action_space.kind}, --policy.network {cfg.network})"
            )
        outputs = head.outputs(action_space.dim) if head is not None else action_space.dim
        body = functools.partial(mlp, layer_norm=cfg.layer_norm) if cfg.layer_norm else mlp
        self.actor, self.critic = networks.build(cfg, features, outputs, body)
        if per_group:  # one actor and critic per agent group (policy/groups.py)
            pairs = [self.actor, self.critic]
            pairs += [m for _ in range(self.groups - 1) for m in networks.build(cfg, features,
                      outputs, body)]  # fmt: skip
            self.actor, self.critic = PerGroup(pairs[0::2]), PerGroup(pairs[1::2])
        if head is not None:  # the deterministic action is the actor's output, as for PPO
            self.actor = nn.Sequential(self.actor, head(action_space.low, action_space.high))
        if cfg.network != "mlp":
            x = torch.zeros(2, features)
            what = "observations" if features == obs_dim and self.core is None else "features"
            _probe(cfg.network, "actor", self.actor, x, (2, action_space.dim), what)
            _probe(cfg.network, "critic", self.critic, x, (2, max(cfg.popart_tasks, 1)), what)
        if self.popart is not None:
            self.value_head()  # refuses a critic that does not end in a [tasks]-output Linear
        if not self.categorical:
            if head is None:  # a Gaussian's log std per action (and per group: per-group)
                shape = (self.groups, action_space.dim) if per_group else (action_space.dim,)
                self.log_std = nn.Parameter(torch.full(shape, cfg.init_log_std))
            self.register_buffer("action_low", torch.tensor(action_space.low))
            self.register_buffer("action_high", torch.tensor(action_space.high))

    @classmethod
    def for_env(cls, env: VecEnv, cfg: PolicyConfig) -> ActorCritic:
        """The policy for ``env``'s observations and actions, on the env's device (an env that
        does not subclass ``VecEnv`` and sets no ``obs_shape``/``obs_dtype`` has vectors; a
        multi-agent env's ``policy_groups`` name its agent groups)."""
        shape, dtype = getattr(env, "obs_shape", None), getattr(env, "obs_dtype", torch.float32)
        groups = len(getattr(env, "policy_groups", ()))
        return cls(env.obs_dim, env.action_space, cfg, shape, dtype, groups).to(env.device)

    # ---- memory ----------------------------------------------------------------------------
    @property
    def recurrent(self) -> bool:
        return self.core is not None

    def initial_memory(self, n: int) -> torch.Tensor:
        """Zero memory for ``n`` envs: [n, slots, H] (empty [n, 0, 0] without a core)."""
        device = self.normalizer.count.device
        if self.core is None:
            return torch.zeros(n, 0, 0, device=device)
        return self.core.initial(n, device)

    def _inputs(
        self,
        obs: torch.Tensor,
        memory: torch.Tensor | None,
        starts: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The heads' inputs for raw observation rows, and the memory after them: one step
        (``starts`` None; ``memory`` [N, ...]) or a time-major sequence of rows [T*n] from its
        first memory [n, ...] (``starts`` [T*n])."""
        if self.encoder is not None:
            x = self.encoder(obs)
        else:
            x = self.normalizer(obs if obs.is_floating_point() else obs.float())
        if self.core is None:
            return x, None
        if memory is None:
            raise ValueError("a recurrent policy needs its memory (policy.initial_memory(n))")
        if starts is None:
            return self.core.step(x, memory)
        return self.core.unroll(x, memory, starts)

    @property
    def head(self) -> SquashedGaussian | Tanh | None:
        """The actor's head (``policy/heads.py``; --policy.head), or None (PPO's outputs)."""
        if isinstance(self.actor, nn.Sequential) and len(self.actor) == 2:
            last = self.actor[1]
            return last if isinstance(last, SquashedGaussian | Tanh) else None
        return None

    @property
    def actor_body(self) -> nn.Module:
        """The actor without its head: what the head's ``sample`` or ``unit`` reads."""
        if self.head is not None:
            assert isinstance(self.actor, nn.Sequential)
            return self.actor[0]
        return self.actor

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """The heads' inputs for raw observation rows [N, obs_dim] (a memoryless policy): the
        normalized observations, or the encoder's features."""
        return self._inputs(obs, None)[0]

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

    def value(self, obs: torch.Tensor, memory: torch.Tensor | None = None) -> torch.Tensor:
        """V(s) [N] for raw observations [N, obs_dim] (a recurrent policy: one step from
        ``memory``, which is left as it is)."""
        x, _ = self._inputs(obs, memory)
        return self._values(self.critic(x), obs)

    def act(
        self,
        obs: torch.Tensor,
        eps: torch.Tensor | None = None,
        memory: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample (actions, log_prob [N], value [N]) for raw observations. Continuous actions are
        returned unclipped (their log-prob must match); use ``env_action`` before stepping.
        ``eps`` [N, A]: the standard normal draws of a Gaussian policy (default: fresh ones).
        ``memory`` (recurrent policies): [N, slots, H], advanced in place by this step."""
        x, new_memory = self._inputs(obs, memory)
        if new_memory is not None and memory is not None:
            memory.copy_(new_memory)
        head = self.head
        if head is not None:  # an off-policy actor's own sampling (SAC), or its action (TD3)
            out = self.actor_body(x)
            value = self._values(self.critic(x), obs)
            if isinstance(head, SquashedGaussian):
                unit, logp = head.sample(out)
                return head.to_env(unit), logp, value
            return head(out), torch.zeros_like(value), value
        out = self._masked(self.actor(x), obs)
        value = self._values(self.critic(x), obs)
        if self.discrete:
            actions, logp = D.categorical_sample(out)
        elif self.nvec:
            actions, logp = D.multi_categorical_sample(out, self.nvec)
        else:
            actions, logp = D.gaussian_sample(out, self._log_std(out, obs), eps)
        return actions, logp, value

    def _log_std(self, out: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        """The Gaussian's log std for each row of ``out`` (per-group: its group's)."""
        if self.log_std.dim() == 2:
            return self.log_std[group_index(obs, self.groups).squeeze(-1)]
        return self.log_std.expand_as(out)

    def _masked(self, logits: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        """``logits`` with the illegal actions' set far below the rest (a finite value: no
        NaN in the entropy), where the env puts a legal-action mask in its observations."""
        if not self.mask_size:
            return logits
        legal = obs[..., -self.mask_size :] > 0.5
        return torch.where(legal, logits, torch.full_like(logits, -1e9))

    def env_action(self, actions: torch.Tensor) -> torch.Tensor:
        """What the env receives: continuous actions clipped to the action bounds."""
        if self.categorical:
            return actions
        return torch.maximum(torch.minimum(actions, self.action_high), self.action_low)

    def deterministic(
        self, obs: torch.Tensor, memory: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(action, the actor's output, the memory after this step) for raw observations,
        without side effects (what an exported file computes)."""
        x, new_memory = self._inputs(obs, memory)
        out = self._masked(self.actor(x), obs)
        if self.nvec:  # multi-discrete: each choice's most likely value
            return D.multi_categorical_mode(out, self.nvec), out, new_memory
        return self.env_action(out.argmax(-1) if self.discrete else out), out, new_memory

    def act_deterministic(
        self, obs: torch.Tensor, memory: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The most likely action (discrete) or the mean (continuous, clipped) for raw
        observations [N, obs_dim]; ``memory`` of a recurrent policy is advanced in place."""
        action, _, new_memory = self.deterministic(obs, memory)
        if new_memory is not None and memory is not None:
            memory.copy_(new_memory)
        return action

    def predict(
        self,
        obs: Any,
        memory: Any = None,
        deterministic: bool = True,
    ) -> tuple[Any, Any]:
        """Stable-Baselines3's ``predict``: ``(action, memory) = policy.predict(obs)``.

        ``obs``: a numpy array or a torch tensor, one observation (``obs_shape``, or a flat
        row) or a batch of them; the action comes back as the same kind (numpy or torch, on
        the observation's device) and batch shape: env actions, clipped to the bounds.
        ``deterministic``: the most likely action or the mean; False samples. ``memory``: a
        recurrent policy's memory from the previous call (None: an episode's start; the
        returned one goes into the next call, zeroed where an episode ended); None comes back
        for a memoryless policy. Nothing is modified in place and no gradient is kept."""
        as_numpy = isinstance(obs, np.ndarray)
        device = self.normalizer.count.device
        x = torch.as_tensor(obs, device=device)
        x = x.to(self.obs_dtype) if x.dtype != self.obs_dtype else x
        single = x.dim() == 1 or (x.dim() == len(self.obs_shape) and x.numel() == self.obs_dim)
        x = x.reshape(-1, self.obs_dim)
        m = None
        if self.recurrent:
            m = self.initial_memory(x.shape[0]) if memory is None else memory
            m = torch.as_tensor(m, device=device, dtype=torch.float32)
            m = m.reshape(x.shape[0], *self.initial_memory(1).shape[1:]).clone()
        with torch.no_grad():
            if deterministic:
                action, _, new_memory = self.deterministic(x, m)
            else:
                sampled, _, _ = self.act(x, memory=m)
                action, new_memory = self.env_action(sampled), m
        out = action[0] if single else action
        if new_memory is not None and single:
            new_memory = new_memory[0]
        if as_numpy:
            return out.cpu().numpy(), None if new_memory is None else new_memory.cpu().numpy()
        return out.to(getattr(obs, "device", device)), new_memory

    def evaluate(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        memory: torch.Tensor | None = None,
        starts: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log_prob [N], entropy [N], value [N]) of given actions under the current policy.
        Recurrent: the rows are time-major sequences [T*n] replayed from ``memory`` [n, ...]
        with ``starts`` [T*n] (``storage.rollout.sequence_minibatches`` forms them)."""
        x, _ = self._inputs(obs, memory, starts if self.core is not None else None)
        out = self._masked(self.actor(x), obs)
        value = self._values(self.critic(x), obs)
        if self.discrete:
            logp, ent = D.categorical_logprob_entropy(out, actions)
        elif self.nvec:
            logp, ent = D.multi_categorical_logprob_entropy(out, actions, self.nvec)
        else:
            logp, ent = D.gaussian_logprob_entropy(out, self._log_std(out, obs), actions)
        return logp, ent, value
