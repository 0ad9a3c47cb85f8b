"""Reach10: ten goal-reaching tasks for a 2-D point mass, batched in plain torch.

A small multi-task suite with binary success, standing in for LIBERO / Meta-World MT10 where
those cannot run: each task is the same point mass in the box [-1, 1]^2 with its own goal and its
own dynamics (mass, damping, a constant wind, an optional round obstacle). Every task ships a
fixed list of 50 init states (``init_states/reach/<task>.json``, like LIBERO's ``.init`` files),
and episodes start from chosen entries of it (``EpisodicVecEnv.reset_rows``). A held-out list of
50 more per task (``held_out=True``; the same generator with seed ``HELD_OUT_SEED``) is what
evaluation runs: start positions training and demonstrations never see.

Dynamics (semi-implicit Euler, dt = 0.1), force u in [-1, 1]^2 (actions are clipped):

    v' = clip(v + dt (F u + wind - damping v) / mass, -v_max, v_max),   F = 2, v_max = 2
    p' = p + dt v'

then walls: p' is clamped to the box and the velocity component into the wall is zeroed; an
obstacle: a point that would end inside the disc is put back on its rim (radially) and loses the
inward component of its velocity, so it slides around.

Success: |p' - goal| < 0.15. Reward 1 on the success step, which terminates the episode;
0 otherwise; truncated after 60 steps. Optional shaping (``shaping`` = c > 0) adds the
potential-based term c (d - d') with d = |p - goal| (Ng et al. 1999), so an episode's shaped
return is success + c (d_0 - d_end) and the optimal policy is unchanged. Default c = 0.

Observation (13): [x, y, vx, vy, gx - x, gy - y, ox - x, oy - y, r, mass, damping, wind_x,
wind_y] (the obstacle terms are zero for tasks without one). The goal and the dynamics are in
the observation, so one policy can tell the tasks apart; a random policy succeeds in a fair
fraction of episodes (every RLOO group has signal early) and a small MLP learns all ten quickly.
"""

from __future__ import annotations

import functools
import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import torch

from distrl.envs.core import ActionSpace
from distrl.envs.episodic import EpisodicVecEnv
from distrl.envs.torch_vec import TorchVecEnv, _where_rows


@dataclass(frozen=True)
class ReachTask:
    """One task of the suite: a goal and the point mass's dynamics."""

    name: str
    goal: tuple[float, float]
    mass: float = 1.0
    damping: float = 0.5
    wind: tuple[float, float] = (0.0, 0.0)
    obstacle: tuple[float, float, float] = (0.0, 0.0, 0.0)  # centre x, y and radius (0: none)


REACH_TASKS: tuple[ReachTask, ...] = (
    ReachTask("reach-east", goal=(0.6, 0.0)),
    ReachTask("reach-west", goal=(-0.6, 0.0)),
    ReachTask("reach-north-heavy", goal=(0.0, 0.6), mass=2.0),
    ReachTask("reach-south-slippery", goal=(0.0, -0.6), mass=0.5, damping=0.1),
    ReachTask("reach-northeast-wind", goal=(0.6, 0.6), wind=(-0.3, 0.0)),
    ReachTask("reach-southwest-sticky", goal=(-0.6, -0.6), damping=1.5),
    ReachTask("reach-southeast-post", goal=(0.6, -0.6), obstacle=(0.2, -0.2, 0.25)),
    ReachTask(
        "reach-northwest-post-wind", goal=(-0.6, 0.6), wind=(0.0, -0.4), obstacle=(-0.2, 0.2, 0.25)
    ),
    ReachTask("reach-center-drift", goal=(0.0, 0.0), mass=1.5, damping=1.0, wind=(0.3, 0.3)),
    ReachTask("reach-far-north-gate", goal=(0.0, 0.85), obstacle=(0.0, 0.45, 0.25)),
)
TASK_NAMES: tuple[str, ...] = tuple(t.name for t in REACH_TASKS)

DT = 0.1
FORCE = 2.0
MAX_SPEED = 2.0
GOAL_RADIUS = 0.15
NUM_INIT_STATES = 50
INIT_STATE_SEED = 20250  # the shipped lists were drawn with this seed (see generate_init_states)
HELD_OUT_SEED = 20251  # the held-out lists: generated on demand, never shipped or trained on
OBS_DIM = 13


def task_index(task: int | str) -> int:
    """Index into ``REACH_TASKS`` of a task given by index or name."""
    if isinstance(task, str):
        if task not in TASK_NAMES:
            raise ValueError(f"unknown reach task {task!r}; tasks: {', '.join(TASK_NAMES)}")
        return TASK_NAMES.index(task)
    if not 0 <= task < len(REACH_TASKS):
        raise ValueError(f"reach task index {task} outside 0..{len(REACH_TASKS) - 1}")
    return int(task)


def generate_init_states(
    task: ReachTask, n: int = NUM_INIT_STATES, seed: int = INIT_STATE_SEED
) -> list[list[float]]:
    """The init-state list of ``task``: ``n`` rows [x, y, vx, vy], at rest, uniform in
    [-0.9, 0.9]^2 at least 0.4 from the goal and 0.05 clear of the obstacle. Deterministic
    (Python's ``random``), rounded to 4 decimals; the shipped files hold exactly these."""
    rng = random.Random(f"{seed}/{task.name}")
    ox, oy, r = task.obstacle
    rows: list[list[float]] = []
    while len(rows) < n:
        x, y = round(rng.uniform(-0.9, 0.9), 4), round(rng.uniform(-0.9, 0.9), 4)
        far_from_goal = math.hypot(x - task.goal[0], y - task.goal[1]) >= 0.4
        clear = r == 0.0 or math.hypot(x - ox, y - oy) >= r + 0.05
        if far_from_goal and clear:
            rows.append([x, y, 0.0, 0.0])
    return rows


@functools.cache
def load_init_states(name: str) -> tuple[tuple[float, ...], ...]:
    """The shipped init-state list of task ``name`` (rows [x, y, vx, vy])."""
    path = resources.files("distrl.envs").joinpath("init_states", "reach", f"{name}.json")
    data = json.loads(path.read_text())
    if data["task"] != name:
        raise ValueError(f"{path} holds init states of {data['task']!r}, not {name!r}")
    return tuple(tuple(float(v) for v in row) for row in data["init_states"])


@functools.cache
def held_out_init_states(name: str) -> tuple[tuple[float, ...], ...]:
    """The held-out init-state list of task ``name``: evaluation's start positions."""
    rows = generate_init_states(REACH_TASKS[task_index(name)], NUM_INIT_STATES, HELD_OUT_SEED)
    return tuple(tuple(row) for row in rows)


class Reach(TorchVecEnv, EpisodicVecEnv):
    """Reach10 point-mass envs: ``num_envs`` rows, each on a task of ``REACH_TASKS``.

    ``task``: one task (index or name) for every row, or one per row (a multi-task batch, e.g.
    for evaluation). Actions [N, 2] force in [-1, 1]; state rows [x, y, vx, vy]. ``held_out``:
    episodes start from the held-out init states instead of the shipped training ones.
    ``step``'s info holds ``final_obs`` and ``success`` [N] bool (equal to ``terminated``).
    """

    state_dim = 4
    default_max_episode_steps = 60
    num_init_states = NUM_INIT_STATES

    def __init__(
        self,
        num_envs: int,
        device: torch.device | str = "cpu",
        max_episode_steps: int | None = None,
        task: int | str | Sequence[int | str] = 0,
        shaping: float = 0.0,
        held_out: bool = False,
    ) -> None:
        self.device = torch.device(device)
        self.num_envs = num_envs
        self.shaping = float(shaping)
        f32: dict[str, Any] = dict(device=self.device, dtype=torch.float32)
        tasks = REACH_TASKS
        self._goal = torch.tensor([t.goal for t in tasks], **f32)
        self._mass = torch.tensor([t.mass for t in tasks], **f32)
        self._damping = torch.tensor([t.damping for t in tasks], **f32)
        self._wind = torch.tensor([t.wind for t in tasks], **f32)
        self._obstacle = torch.tensor([t.obstacle for t in tasks], **f32)
        states = held_out_init_states if held_out else load_init_states
        self._init_table = torch.tensor([states(t.name) for t in tasks], **f32)
        self.set_task(task)
        space = ActionSpace("continuous", low=(-1.0, -1.0), high=(1.0, 1.0))
        super().__init__(num_envs, self.device, max_episode_steps, OBS_DIM, space)

    def set_task(self, task: int | str | Sequence[int | str]) -> None:
        """Put every row (or row i, given a sequence) on a task; call ``reset*`` afterwards."""
        ids = [task] * self.num_envs if isinstance(task, int | str) else list(task)
        if len(ids) != self.num_envs:
            raise ValueError(f"got {len(ids)} task ids for {self.num_envs} envs")
        self.task_ids = torch.tensor([task_index(t) for t in ids], device=self.device)
        t = self.task_ids
        self.goal, self.mass, self.damping = self._goal[t], self._mass[t], self._damping[t]
        self.wind, self.obstacle = self._wind[t], self._obstacle[t]
        # Constant observation columns, precomputed: obstacle radius, mass, damping, wind.
        self._task_obs = torch.cat(
            (self.obstacle[:, 2:], self.mass[:, None], self.damping[:, None], self.wind), 1
        )

    # ---- TorchVecEnv hooks ---------------------------------------------------------------
    def _sample_initial_state(self) -> torch.Tensor:
        idx = torch.randint(
            self.num_init_states, (self.num_envs,), generator=self.generator, device=self.device
        )
        return self._init_table[self.task_ids, idx]

    def _observe(self, state: torch.Tensor) -> torch.Tensor:
        pos = state[:, :2]
        has_obstacle = (self.obstacle[:, 2:] > 0).to(state.dtype)
        to_obstacle = (self.obstacle[:, :2] - pos) * has_obstacle
        return torch.cat((state, self.goal - pos, to_obstacle, self._task_obs), 1)

    def _dynamics(
        self, state: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        pos, vel = state[:, :2], state[:, 2:]
        u = actions.reshape(self.num_envs, 2).to(torch.float32).clamp(-1.0, 1.0)
        accel = (FORCE * u + self.wind - self.damping[:, None] * vel) / self.mass[:, None]
        new_vel = (vel + DT * accel).clamp(-MAX_SPEED, MAX_SPEED)
        new_pos = pos + DT * new_vel
        clamped = new_pos.clamp(-1.0, 1.0)
        new_vel = torch.where(clamped != new_pos, torch.zeros_like(new_vel), new_vel)
        # Obstacle: a point that ends inside the disc is pushed out radially to its rim and
        # loses the inward part of its velocity, so it slides around the obstacle.
        centre, radius = self.obstacle[:, :2], self.obstacle[:, 2:]
        offset = clamped - centre
        dist_c = offset.norm(dim=1, keepdim=True)
        normal = offset / dist_c.clamp_min(1e-6)
        blocked = dist_c < radius
        new_pos = torch.where(blocked, centre + normal * radius, clamped)
        inward = (new_vel * normal).sum(1, keepdim=True).clamp_max(0.0)
        new_vel = torch.where(blocked, new_vel - inward * normal, new_vel)
        dist = (new_pos - self.goal).norm(dim=1)
        success = dist < GOAL_RADIUS
        reward = success.to(torch.float32)
        if self.shaping:
            reward = reward + self.shaping * ((pos - self.goal).norm(dim=1) - dist)
        return torch.cat((new_pos, new_vel), 1), reward, success

    # ---- episodic interface ----------------------------------------------------------------
    def step(
        self, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(actions)
        info["success"] = terminated
        return obs, reward, terminated, truncated, info

    def reset_rows(self, mask: torch.Tensor, init_indices: torch.Tensor) -> torch.Tensor:
        idx = torch.where(mask, init_indices, torch.zeros_like(init_indices))
        self.state = _where_rows(mask, self._init_table[self.task_ids, idx], self.state)
        self.elapsed.masked_fill_(mask, 0)
        return self._observe(self.state)

    def state_dict(self) -> dict[str, Any]:
        return super().state_dict() | {"task_ids": self.task_ids.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.set_task(state["task_ids"].tolist())
        super().load_state_dict(state)
