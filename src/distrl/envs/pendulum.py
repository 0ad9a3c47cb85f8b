"""Batched Pendulum-v1 in plain torch.

The classic inverted-pendulum swing-up with continuous torque, exactly as Gymnasium's
``Pendulum-v1``: g = 10, m = l = 1, dt = 0.05, |thdot| <= 8, |u| <= 2, semi-implicit Euler
(velocity first), reward -(angle_normalize(th)^2 + 0.1 thdot^2 + 0.001 u^2), never terminates,
truncated after 200 steps. Gymnasium computes in float64; we compute in float32.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from distrl.envs import draw
from distrl.envs.core import ActionSpace
from distrl.envs.torch_vec import TorchVecEnv


class Pendulum(TorchVecEnv):
    """Gymnasium ``Pendulum-v1``: obs [cos th, sin th, thdot]; actions [N, 1] torque in [-2, 2].

    The state is [th, thdot] with th unwrapped (as in Gymnasium); start th ~ U(-pi, pi),
    thdot ~ U(-1, 1). Actions outside the bounds are clipped, as Gymnasium does.
    """

    state_dim = 2
    default_max_episode_steps = 200

    max_speed = 8.0
    max_torque = 2.0
    dt = 0.05
    g = 10.0
    m = 1.0
    l = 1.0

    def __init__(
        self,
        num_envs: int,
        device: torch.device | str = "cpu",
        max_episode_steps: int | None = None,
    ) -> None:
        self._init_high = torch.tensor([math.pi, 1.0], device=device)  # used by super().__init__
        space = ActionSpace("continuous", low=(-self.max_torque,), high=(self.max_torque,))
        super().__init__(num_envs, device, max_episode_steps, 3, space)

    def _sample_initial_state(self) -> torch.Tensor:
        u = torch.rand(
            (self.num_envs, 2), generator=self.generator, device=self.device, dtype=torch.float32
        )
        return u.mul_(2.0).sub_(1.0).mul_(self._init_high)  # U(-high, high), high = (pi, 1)

    def _observe(self, state: torch.Tensor) -> torch.Tensor:
        th = state[:, 0]
        return torch.stack((torch.cos(th), torch.sin(th), state[:, 1]), dim=1)

    def _dynamics(
        self, state: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        th, thdot = state[:, 0], state[:, 1]
        u = actions.reshape(self.num_envs).to(torch.float32)  # no copy when already float32
        u = u.clamp(-self.max_torque, self.max_torque)
        costs = _angle_normalize(th) ** 2 + 0.1 * thdot**2 + 0.001 * u**2
        accel = 3 * self.g / (2 * self.l) * torch.sin(th) + 3.0 / (self.m * self.l**2) * u
        newthdot = (thdot + accel * self.dt).clamp_(-self.max_speed, self.max_speed)
        newth = th + newthdot * self.dt
        next_state = torch.stack((newth, newthdot), dim=1)
        terminated = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        return next_state, costs.neg_(), terminated

    render_fps = 20  # 1 / dt

    def render_rgb(self) -> np.ndarray:
        """Row 0 as Gymnasium draws it (500x500: the rod from the pivot; 0 is upright)."""
        th = float(self.state[0, 0])
        img = draw.canvas(500, 500)
        scale = 500 / (2 * 2.2)
        tip = (250 - math.sin(th) * scale, 250 - math.cos(th) * scale)
        draw.segment(img, (250.0, 250.0), tip, 0.1 * scale, (204, 77, 77))
        draw.segment(img, (250.0, 250.0), (250.0, 250.0), 0.05 * scale, draw.BLACK)
        return img


def _angle_normalize(x: torch.Tensor) -> torch.Tensor:
    """Angles to [-pi, pi) like Gymnasium's ``angle_normalize`` (remainder: sign of divisor)."""
    return torch.remainder(x + math.pi, 2 * math.pi) - math.pi
