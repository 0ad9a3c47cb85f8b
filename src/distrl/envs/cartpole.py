"""Batched CartPole-v1 in plain torch.

CartPole is the cart-pole balancing task of Barto, Sutton & Anderson, "Neuronlike adaptive elements
that can solve difficult learning control problems" (IEEE SMC 1983), with exactly the dynamics,
constants, thresholds, reward and time limit of Gymnasium's ``CartPole-v1`` (euler integrator).
Gymnasium integrates in float64; we integrate in float32, which agrees to ~1e-7 per step.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from distrl.envs import draw
from distrl.envs.core import ActionSpace
from distrl.envs.torch_vec import TorchVecEnv


class CartPole(TorchVecEnv):
    """Gymnasium ``CartPole-v1``: obs [x, x_dot, theta, theta_dot]; actions 0 (left), 1 (right).

    Reward 1 on every step including the terminating one; terminated when |x| > 2.4 or
    |theta| > 12 degrees; truncated after 500 steps; start state U(-0.05, 0.05)^4.
    """

    state_dim = 4
    default_max_episode_steps = 500

    gravity = 9.8
    masscart = 1.0
    masspole = 0.1
    total_mass = masspole + masscart
    length = 0.5  # half the pole's length
    polemass_length = masspole * length
    force_mag = 10.0
    tau = 0.02  # seconds between state updates
    theta_threshold_radians = 12 * 2 * math.pi / 360
    x_threshold = 2.4

    def __init__(
        self,
        num_envs: int,
        device: torch.device | str = "cpu",
        max_episode_steps: int | None = None,
    ) -> None:
        super().__init__(num_envs, device, max_episode_steps, 4, ActionSpace("discrete", n=2))
        # Lookup table instead of `where(action == 1, f, -f)`: one gather op per step.
        self._force = torch.tensor([-self.force_mag, self.force_mag], device=self.device)

    def _sample_initial_state(self) -> torch.Tensor:
        u = torch.rand(
            (self.num_envs, 4), generator=self.generator, device=self.device, dtype=torch.float32
        )
        return u.mul_(0.1).sub_(0.05)  # U(-0.05, 0.05) = low + (high - low) * U(0, 1)

    def _dynamics(
        self, state: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        # Same formulas as Gymnasium (Florian, "Correct equations for the dynamics of the
        # cart-pole system", 2007), folded into fused ops (addcmul) to keep the op count low.
        theta, theta_dot = state[:, 2], state[:, 3]
        force = torch.take(self._force, actions)
        costheta, sintheta = torch.cos(theta), torch.sin(theta)
        # temp = (force + polemass_length * theta_dot^2 * sin) / total_mass
        temp = torch.addcmul(force, theta_dot * theta_dot, sintheta, value=self.polemass_length)
        temp.div_(self.total_mass)
        # thetaacc = (g sin - cos temp) / (length (4/3 - masspole cos^2 / total_mass))
        thetaacc = torch.addcmul(self.gravity * sintheta, costheta, temp, value=-1.0)
        denom = (costheta * costheta).mul_(-self.masspole / self.total_mass).add_(4.0 / 3.0)
        thetaacc.div_(denom.mul_(self.length))
        # xacc = temp - polemass_length * thetaacc * cos / total_mass
        k = self.polemass_length / self.total_mass
        xacc = torch.addcmul(temp, thetaacc, costheta, value=-k)
        # Euler: s' = s + tau * (x_dot, xacc, theta_dot, thetaacc)
        deriv = torch.stack((state[:, 1], xacc, theta_dot, thetaacc), dim=1)
        next_state = torch.add(state, deriv, alpha=self.tau)
        # |x| > 2.4 or |theta| > 12 deg; per column (a broadcast compare + any costs twice as much).
        terminated = next_state[:, 0].abs() > self.x_threshold
        terminated |= next_state[:, 2].abs() > self.theta_threshold_radians
        reward = torch.ones(self.num_envs, device=self.device)
        return next_state, reward, terminated

    render_fps = 50  # 1 / tau

    def render_rgb(self) -> np.ndarray:
        """Row 0 as Gymnasium draws it (600x400: the track, the cart, the pole)."""
        x, _, theta, _ = self.state[0].tolist()
        img = draw.canvas(400, 600)
        scale = 600 / (2 * self.x_threshold)
        cart_x, axle_y = 300 + x * scale, 300 - 15
        draw.box(img, 0, 300, 600, 301, draw.BLACK)  # the track
        draw.box(img, cart_x - 25, 300 - 30, cart_x + 25, 300, draw.BLACK)
        tip = (cart_x + math.sin(theta) * 2 * self.length * scale,
               axle_y - math.cos(theta) * 2 * self.length * scale)  # fmt: skip
        draw.segment(img, (cart_x, axle_y), tip, 5, (202, 152, 101))
        draw.segment(img, (cart_x, axle_y), (cart_x, axle_y), 5, (129, 132, 203))
        return img


class CartPoleNoVelocity(CartPole):
    """CartPole with the velocities hidden: obs [x, theta] only (the partially observed
    CartPole of recurrent-RL benchmarks, e.g. SB3-contrib's ``CartPoleNoVel``). The dynamics,
    reward and limits are CartPole-v1's; a policy must infer x_dot and theta_dot from the past,
    so a memoryless MLP balances the pole far shorter than a recurrent policy does."""

    def __init__(
        self,
        num_envs: int,
        device: torch.device | str = "cpu",
        max_episode_steps: int | None = None,
    ) -> None:
        super().__init__(num_envs, device, max_episode_steps)
        self.obs_dim = 2

    def _observe(self, state: torch.Tensor) -> torch.Tensor:
        return state[:, 0::2]  # x, theta
