"""Batched Acrobot-v1 in plain torch.

The two-link underactuated swing-up of Sutton, "Generalization in reinforcement learning:
successful examples using sparse coarse coding" (NIPS 1996), with the dynamics of Sutton & Barto,
"Reinforcement Learning: An Introduction" (the "book" variant), exactly as Gymnasium's
``Acrobot-v1``: one RK4 step of dt = 0.2 s per action, angles wrapped to [-pi, pi], velocities
clipped to 4 pi and 9 pi, torque noise 0, reward -1 per step and 0 on the terminating step.

The state is integrated in float64, as Gymnasium does, with Gymnasium's formulas in Gymnasium's
order of operations: one step then matches Gymnasium to the last bit in our tests, whereas float32
state drifts by up to ~2e-4 rad/s in the velocities after a single 0.2 s RK4 step.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from distrl.envs import draw
from distrl.envs.core import ActionSpace
from distrl.envs.torch_vec import TorchVecEnv


class Acrobot(TorchVecEnv):
    """Gymnasium ``Acrobot-v1``: obs [cos t1, sin t1, cos t2, sin t2, dt1, dt2]; torques -1, 0, 1.

    Terminated when the free end is above the bar, -cos(t1) - cos(t1 + t2) > 1; truncated after
    500 steps; start state U(-0.1, 0.1)^4.
    """

    state_dim = 4
    default_max_episode_steps = 500
    state_dtype = torch.float64

    dt = 0.2
    link_length_1 = 1.0
    link_mass_1 = 1.0
    link_mass_2 = 1.0
    link_com_pos_1 = 0.5
    link_com_pos_2 = 0.5
    link_moi = 1.0
    max_vel_1 = 4 * math.pi
    max_vel_2 = 9 * math.pi
    gravity = 9.8

    def __init__(
        self,
        num_envs: int,
        device: torch.device | str = "cpu",
        max_episode_steps: int | None = None,
    ) -> None:
        super().__init__(num_envs, device, max_episode_steps, 6, ActionSpace("discrete", n=3))
        self._torque = torch.tensor([-1.0, 0.0, 1.0], dtype=torch.float64, device=self.device)
        self._vel_max = torch.tensor(
            [self.max_vel_1, self.max_vel_2], dtype=torch.float64, device=self.device
        )

    def _sample_initial_state(self) -> torch.Tensor:
        # Gymnasium draws float64 and rounds the start state to float32; so do we.
        u = torch.rand(
            (self.num_envs, 4), generator=self.generator, device=self.device, dtype=torch.float32
        )
        return u.mul_(0.2).sub_(0.1).double()

    def _observe(self, state: torch.Tensor) -> torch.Tensor:
        angles = state[:, :2]
        cos, sin = torch.cos(angles), torch.sin(angles)
        obs = torch.stack((cos[:, 0], sin[:, 0], cos[:, 1], sin[:, 1], state[:, 2], state[:, 3]), 1)
        return obs.float()

    def _dsdt(self, s: torch.Tensor, torque: torch.Tensor) -> torch.Tensor:
        """d/dt of s = [t1, t2, dt1, dt2] ([N, 4]) under ``torque`` [N] (book dynamics)."""
        m1, m2 = self.link_mass_1, self.link_mass_2
        l1, lc1, lc2 = self.link_length_1, self.link_com_pos_1, self.link_com_pos_2
        i1 = i2 = self.link_moi
        g = self.gravity
        theta1, theta2, dtheta1, dtheta2 = s.unbind(1)
        cos2, sin2 = torch.cos(theta2), torch.sin(theta2)
        d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * cos2) + i1 + i2
        d2 = m2 * (lc2**2 + l1 * lc2 * cos2) + i2
        phi2 = m2 * lc2 * g * torch.cos(theta1 + theta2 - math.pi / 2.0)
        phi1 = (
            -m2 * l1 * lc2 * dtheta2**2 * sin2
            - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * sin2
            + (m1 * lc1 + m2 * l1) * g * torch.cos(theta1 - math.pi / 2)
            + phi2
        )
        ddtheta2 = (torque + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * sin2 - phi2) / (
            m2 * lc2**2 + i2 - d2**2 / d1
        )
        ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
        return torch.stack((dtheta1, dtheta2, ddtheta1, ddtheta2), dim=1)

    def _dynamics(
        self, state: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        torque = torch.take(self._torque, actions)
        # Gymnasium's rk4 over t = [0, dt]: one classical Runge-Kutta step.
        dt, dt2 = self.dt, self.dt / 2.0
        k1 = self._dsdt(state, torque)
        k2 = self._dsdt(state + dt2 * k1, torque)
        k3 = self._dsdt(state + dt2 * k2, torque)
        k4 = self._dsdt(state + dt * k3, torque)
        ns = state + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        angles = _wrap(ns[:, :2], -math.pi, math.pi)
        velocities = torch.clamp(ns[:, 2:], -self._vel_max, self._vel_max)
        next_state = torch.cat((angles, velocities), dim=1)
        t1, t2 = angles[:, 0], angles[:, 1]
        terminated = -torch.cos(t1) - torch.cos(t2 + t1) > 1.0
        reward = terminated.to(torch.float32) - 1.0  # -1 per step, 0 on reaching the goal
        return next_state, reward, terminated

    render_fps = 5  # 1 / dt

    def render_rgb(self) -> np.ndarray:
        """Row 0 as Gymnasium draws it (500x500: two links from the pivot, the goal line)."""
        t1, t2 = self.state[0, :2].tolist()
        img = draw.canvas(500, 500)
        scale = 500 / (2 * 2.2)
        goal_y = 250 - 1.0 * scale
        draw.box(img, 0, goal_y, 500, goal_y + 1, draw.BLACK)
        p0 = (250.0, 250.0)
        p1 = (250 + math.sin(t1) * scale, 250 + math.cos(t1) * scale)
        p2 = (p1[0] + math.sin(t1 + t2) * scale, p1[1] + math.cos(t1 + t2) * scale)
        for a, b in ((p0, p1), (p1, p2)):
            draw.segment(img, a, b, 5, (0, 204, 204))
            draw.segment(img, a, a, 5, (204, 204, 0))
        return img


def _wrap(x: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """Gymnasium's ``wrap``: shift ``x`` by whole periods (high - low) into [low, high].

    Gymnasium subtracts the period in a while loop; ``k * period`` with the same loop count k gives
    the identical result for k = 1 (the only case reachable from a bounded state in one step).
    """
    period = high - low
    above = torch.ceil((x - high) / period).clamp_(min=0)
    below = torch.ceil((low - x) / period).clamp_(min=0)
    return x - above * period + below * period
