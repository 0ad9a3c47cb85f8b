"""Actor heads for the off-policy learners of continuous actions (``--policy.head``): the last
piece of the actor, after its body, so that the deterministic action the actor computes is the
one every tool deploys (evaluation, ``play``, ``export``, ``predict``).

Both map the body's output to a unit action u in [-1, 1]^A and then to the env's bounds,
a = low + (u + 1) (high - low) / 2. The critics and the replay see unit actions.

SquashedGaussian (SAC, Haarnoja et al. 2018): the body gives [mean | log_std], log_std squashed
into [-5, 2] (CleanRL's range); u = tanh(mean + std eps), and
log pi(u) = log N(mean + std eps) - sum log(1 - u^2 + 1e-6) (the change of variables; the
constant of the affine map to the bounds is left out, as SB3 and CleanRL do).
Tanh (TD3, Fujimoto et al. 2018): u = tanh(body output).
"""

from __future__ import annotations

import math

import torch
from torch import nn

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
_LOG_2PI = math.log(2.0 * math.pi)


class _Bounded(nn.Module):
    """Unit actions to the env's bounds."""

    scale: torch.Tensor
    centre: torch.Tensor

    def __init__(self, low: tuple[float, ...], high: tuple[float, ...]):
        super().__init__()
        lo, hi = torch.tensor(low), torch.tensor(high)
        if not (torch.isfinite(lo).all() and torch.isfinite(hi).all()):
            raise ValueError(
                f"--policy.head {self.name} squashes actions into their bounds, and this env's "
                f"are not finite ({low} .. {high}); wrap it in gymnasium's RescaleAction"
            )
        self.register_buffer("scale", (hi - lo) / 2.0)
        self.register_buffer("centre", (hi + lo) / 2.0)

    name = ""

    def to_env(self, unit: torch.Tensor) -> torch.Tensor:
        return self.centre + self.scale * unit

    def to_unit(self, action: torch.Tensor) -> torch.Tensor:
        return (action - self.centre) / self.scale


class SquashedGaussian(_Bounded):
    name = "squashed-gaussian"

    @staticmethod
    def outputs(action_dim: int) -> int:
        return 2 * action_dim

    def forward(self, out: torch.Tensor) -> torch.Tensor:
        """The deterministic action (env units): the squashed mean."""
        mean = out[..., : out.shape[-1] // 2]
        return self.to_env(torch.tanh(mean))

    def sample(self, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(unit action [N, A], its log-probability [N]) drawn from the body's output."""
        mean, log_std = out.chunk(2, dim=-1)
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(log_std) + 1.0)
        eps = torch.randn_like(mean)
        pre = mean + log_std.exp() * eps
        unit = torch.tanh(pre)
        logp = -0.5 * eps.pow(2) - log_std - 0.5 * _LOG_2PI - torch.log1p(-unit.pow(2) + 1e-6)
        return unit, logp.sum(-1)


class Tanh(_Bounded):
    name = "tanh"

    @staticmethod
    def outputs(action_dim: int) -> int:
        return action_dim

    def forward(self, out: torch.Tensor) -> torch.Tensor:
        return self.to_env(torch.tanh(out))

    def unit(self, out: torch.Tensor) -> torch.Tensor:
        return torch.tanh(out)


HEADS: dict[str, type[SquashedGaussian] | type[Tanh]] = {
    SquashedGaussian.name: SquashedGaussian,
    Tanh.name: Tanh,
}
