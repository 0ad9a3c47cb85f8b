"""n-step transitions (Sutton 1988; the multi-step targets of Rainbow and Ape-X), built per env
from a window of its last n steps before they go into the replay:

    R  = sum_{k<m} gamma^k r_{t+k}
    s' = the observation after step t+m-1 (the final one where an episode ended there)
    y  = R + gamma^m (1 - terminated) Q'(s', .)

m = n, or fewer where the episode ended (terminated or truncated) at step t+m-1 inside the
window: the sum stops at the episode's end, ``terminated`` is that step's, and a time limit
bootstraps from the final observation with gamma^m, since ``next_obs`` of each step is already
the final observation where the episode ended (``runner/off_policy.py``).

Every env step starts exactly one n-step transition, and every env's window fills at the same
step, so each push of N envs gives N transitions of the step n-1 pushes ago: the rows keep the
replay's shape, with no per-env loop, no host sync and no variable row count. An episode's last
steps reach the replay up to n-1 steps later than they could; that delay is all it costs.

The window is part of the rank's training state (``state_dict``), so that a resume stores the
same transitions as the uninterrupted run.
"""

from __future__ import annotations

from typing import Any

import torch

WINDOW_FIELDS = ("obs", "actions", "rewards", "next_obs", "terminated", "truncated")


class NStepWindow:
    """The last n steps of N envs in a ring [n, N, ...], oldest at ``head``."""

    def __init__(
        self,
        n: int,
        num_envs: int,
        obs_dim: int,
        obs_dtype: torch.dtype,
        action_shape: tuple[int, ...],
        action_dtype: torch.dtype,
        gamma: float,
        device: torch.device,
    ):
        if n < 1:
            raise ValueError(f"an n-step window needs n >= 1, got {n}")
        self.n, self.device = n, device
        z: dict[str, Any] = dict(device=device)
        self.obs = torch.zeros(n, num_envs, obs_dim, dtype=obs_dtype, **z)
        self.next_obs = torch.zeros(n, num_envs, obs_dim, dtype=obs_dtype, **z)
        self.actions = torch.zeros(n, num_envs, *action_shape, dtype=action_dtype, **z)
        self.rewards = torch.zeros(n, num_envs, **z)
        self.terminated = torch.zeros(n, num_envs, dtype=torch.bool, **z)
        self.truncated = torch.zeros(n, num_envs, dtype=torch.bool, **z)
        self.head = 0  # the slot of the oldest step held
        self.count = 0  # steps held (n once full; the same for every env)
        # gamma^k, k = 0..n, in float64 then float32: the reward weights and the discounts
        self.powers = torch.tensor([gamma**k for k in range(n + 1)], dtype=torch.float64)
        self.powers = self.powers.to(device, torch.float32)
        self.envs = torch.arange(num_envs, device=device)

    def push(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        next_obs: torch.Tensor,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
    ) -> dict[str, torch.Tensor] | None:
        """Add one step of N envs (``next_obs``: the final observation where an episode ended);
        once the window holds n steps, return the n-step transitions [N] that start at its
        oldest step (``obs``, ``actions``, ``rewards``, ``next_obs``, ``terminated``,
        ``discount``) and drop that step."""
        slot = (self.head + self.count) % self.n
        step = (obs, actions, rewards, next_obs, terminated, truncated)
        for name, x in zip(WINDOW_FIELDS, step, strict=True):
            getattr(self, name)[slot] = x
        self.count += 1
        if self.count < self.n:
            return None
        rows = self._oldest_transition()
        self.head = (self.head + 1) % self.n
        self.count -= 1
        return rows

    def _oldest_transition(self) -> dict[str, torch.Tensor]:
        """The n-step transitions of the oldest step held, the window full."""
        order = [(self.head + k) % self.n for k in range(self.n)]  # oldest first
        rewards = self.rewards[order]
        done = self.terminated[order] | self.truncated[order]  # [n, N]
        # step k counts while no episode ended at steps 0..k-1 of the window
        ended_before = done.long().cumsum(0) - done.long()
        counts = ended_before == 0
        m = counts.sum(0)  # [N]: the steps summed, 1..n
        weights = self.powers[: self.n].unsqueeze(1)
        ret = torch.where(counts, weights * rewards, 0.0).sum(0)
        last = (self.head + m - 1) % self.n  # the slot of the last step summed, per env
        return {
            "obs": self.obs[self.head].clone(),
            "actions": self.actions[self.head].clone(),
            "rewards": ret,
            "next_obs": self.next_obs[last, self.envs],
            "terminated": self.terminated[last, self.envs],
            "discount": self.powers[m],
        }

    # ---- checkpoints -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The steps held, on the CPU, with the ring's position."""
        state: dict[str, Any] = {"n": self.n, "head": self.head, "count": self.count}
        return state | {name: getattr(self, name).cpu() for name in WINDOW_FIELDS}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if int(state["n"]) != self.n:
            raise ValueError(
                f"the checkpoint's n-step window holds {state['n']} steps, this run's "
                f"--offpolicy.n-step {self.n}; resume with the saved run's"
            )
        for name in WINDOW_FIELDS:
            mine, saved = getattr(self, name), state[name]
            if saved.shape != mine.shape:
                raise ValueError(
                    f"the checkpoint's n-step window field {name!r} is {tuple(saved.shape)}, "
                    f"expected {tuple(mine.shape)}: saved from another env"
                )
            mine.copy_(saved.to(self.device, mine.dtype))
        self.head, self.count = int(state["head"]), int(state["count"])
