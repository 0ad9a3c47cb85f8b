"""Batched MuJoCo locomotion with Gymnasium v5 semantics: HalfCheetah, Hopper, Walker2d, Ant.

The robots are those of the MuJoCo benchmark suite (Todorov, Erez & Tassa, "MuJoCo: A physics
engine for model-based control", IROS 2012; Brockman et al., "OpenAI Gym", 2016), with the
observations, rewards, termination rules, reset noise and 1000-step time limit of Gymnasium's
``*-v5`` classes and Gymnasium's own XML assets (read from the installed ``gymnasium`` package).

One ``MjModel`` is shared by all ``N`` envs; the batch's state lives in one float64 array of
MuJoCo state vectors, ``[N, nstate]`` (``mj_getState``). A step advances every row by
``frame_skip`` physics steps in C:

* HalfCheetah, Hopper, Walker2d: everything they observe is in ``qpos``/``qvel``, so one
  ``mujoco.rollout`` call steps the whole batch on a C thread pool without touching Python per
  env. Rollout starts every trajectory from a zero solver warm start (Gymnasium carries the last
  step's), which changes results only within the constraint solver's tolerance.
* Ant observes ``cfrc_ext`` and takes its forward speed from the torso's ``xpos``, quantities that
  ``mj_step`` leaves in ``mjData`` from the last Runge-Kutta stage of its last substep and that
  no state vector carries. Each row is therefore stepped with ``mj_step`` on a scratch ``MjData``
  per worker thread (MuJoCo releases the GIL inside ``mj_step``) with the same MuJoCo calls as
  Gymnasium and the warm start kept in the state vector: trajectories agree to ~1e-14.

Threads: ``num_threads`` (default ``torch.get_num_threads()``, which the runner sets per rank), so
physics and torch never oversubscribe the cores. Physics runs on the CPU; observations, rewards and
flags are returned as tensors on ``device``. Done rows reset in the same step and the observation
that ended the episode is in ``info["final_obs"]`` (the ``VecEnv`` contract).

Needs the ``mujoco`` extra: ``pip install -c constraints.txt -e '.[mujoco]'`` (or ``make
setup-mujoco``).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import gymnasium
import mujoco
import numpy as np
import torch
from mujoco import rollout as mj_rollout

from distrl.envs.core import ActionSpace, VecEnv, check_saved_shape

ASSETS = Path(gymnasium.__file__).parent / "envs" / "mujoco" / "assets"

_TIME = int(mujoco.mjtState.mjSTATE_TIME)
_QPOS = int(mujoco.mjtState.mjSTATE_QPOS)
_QVEL = int(mujoco.mjtState.mjSTATE_QVEL)
_ACT = int(mujoco.mjtState.mjSTATE_ACT)
_WARMSTART = int(mujoco.mjtState.mjSTATE_WARMSTART)
_CTRL = int(mujoco.mjtState.mjSTATE_CTRL)
_FULLPHYSICS = int(mujoco.mjtState.mjSTATE_FULLPHYSICS)


def _within(value: np.ndarray, low: float, high: float, inclusive: bool = False) -> np.ndarray:
    """low < value < high elementwise (<= with ``inclusive``); NaN is never within."""
    if inclusive:
        return (low <= value) & (value <= high)
    return (low < value) & (value < high)


class MujocoVecEnv(VecEnv):
    """``num_envs`` copies of one Gymnasium v5 MuJoCo task, stepped as one batch.

    Subclasses set the task's constants and define ``_observe`` and ``_reward_terminated``.
    ``set_state`` mirrors Gymnasium's ``MujocoEnv.set_state`` (tests use it to put both in the
    same state). Reset noise is drawn from ``self.generator`` (a CPU ``torch.Generator``) only for
    rows that reset, so a seed, or a ``state_dict``, reproduces the same episodes.
    """

    xml_file: str
    frame_skip: int
    default_max_episode_steps = 1000
    max_episode_steps: int
    forward_reward_weight = 1.0
    ctrl_cost_weight: float
    reset_noise_scale: float
    qvel_noise: str  # "uniform": U(-scale, scale); "normal": scale * N(0, 1)
    obs_qpos_skip = 1  # leading qpos entries (x, or x and y) left out of the observation
    # Step each row with mj_step on a scratch MjData (for tasks that read mjData fields which no
    # state vector holds) instead of one mujoco.rollout call for the batch.
    steps_data = False
    # mjvCamera fields of the video camera (distrl.render): Gymnasium v5's DEFAULT_CAMERA_CONFIG.
    camera: dict[str, float] = {"distance": 4.0}

    def __init__(
        self,
        num_envs: int,
        device: torch.device | str = "cpu",
        max_episode_steps: int | None = None,
        num_threads: int | None = None,
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, got {num_envs}")
        if max_episode_steps is not None and max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be positive or None, got {max_episode_steps}")
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.max_episode_steps = (
            self.default_max_episode_steps if max_episode_steps is None else max_episode_steps
        )
        self.num_threads = max(1, torch.get_num_threads() if num_threads is None else num_threads)

        self.model = mujoco.MjModel.from_xml_path(str(ASSETS / self.xml_file))
        m = self.model
        self.nq, self.nv, self.nu = m.nq, m.nv, m.nu
        self.dt = m.opt.timestep * self.frame_skip
        low, high = m.actuator_ctrlrange.astype(np.float32).T  # Gymnasium's Box bounds
        self.action_space = ActionSpace(
            "continuous", low=tuple(map(float, low)), high=tuple(map(float, high))
        )

        # State vector layout: [time, qpos, qvel, act, (warm start), plugin state].
        self._spec = _FULLPHYSICS | (_WARMSTART if self.steps_data else 0)
        self.nstate = mujoco.mj_stateSize(m, self._spec)
        self._qpos = slice(mujoco.mj_stateSize(m, _TIME), mujoco.mj_stateSize(m, _TIME | _QPOS))
        self._qvel = slice(self._qpos.stop, self._qpos.stop + self.nv)
        self._warmstart = slice(
            mujoco.mj_stateSize(m, _TIME | _QPOS | _QVEL | _ACT),
            mujoco.mj_stateSize(m, _TIME | _QPOS | _QVEL | _ACT | _WARMSTART),
        )
        # The state right after mj_resetData (Gymnasium resets the data before adding noise).
        data = mujoco.MjData(m)
        self._reset_row = np.empty(self.nstate)
        mujoco.mj_getState(m, data, self._reset_row, self._spec)
        self._init_qpos = data.qpos.copy()

        self._state = np.empty((num_envs, self.nstate))
        self.elapsed = np.zeros(num_envs, dtype=np.int64)
        self.total_steps = 0
        self.generator = torch.Generator()
        self.generator.seed()  # non-deterministic until reset(seed) is called

        self._datas = [mujoco.MjData(m) for _ in range(self.num_threads)]  # one per thread
        if self.steps_data:
            self._pool = ThreadPoolExecutor(self.num_threads) if self.num_threads > 1 else None
        else:
            # nthread=0 runs on the calling thread (no pool hand-off for a single thread).
            self._rollout = mj_rollout.Rollout(
                nthread=self.num_threads if self.num_threads > 1 else 0
            )
            self._models = [m] * num_envs
            self._control = np.zeros((num_envs, self.frame_skip, self.nu))
            self._trajectory = np.zeros((num_envs, self.frame_skip, self.nstate))
        self._init_data_fields()
        self._reset_rows(slice(None))  # first start states, random until reset(seed)
        self.obs_dim = self._observe(slice(None)).shape[1]

    # ---- the task (subclasses) -------------------------------------------------------------

    def _observe(self, rows: slice | np.ndarray) -> np.ndarray:
        """Observations of ``rows`` of the current state, [n, obs_dim] float64: by default
        ``[qpos[obs_qpos_skip:], qvel]``."""
        s = self._state[rows]
        return np.concatenate((s[:, self._qpos][:, self.obs_qpos_skip :], s[:, self._qvel]), 1)

    def _reward_terminated(
        self, ctrl: np.ndarray, x_velocity: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(reward [N] float64, terminated [N] bool) of the step that led to the current state."""
        raise NotImplementedError

    def _forward_position(self) -> np.ndarray:
        """The x coordinate whose change per ``dt`` is the forward velocity, [N]."""
        return self._state[:, self._qpos.start]

    def _ctrl_cost(self, ctrl: np.ndarray) -> np.ndarray:
        return self.ctrl_cost_weight * np.square(ctrl).sum(axis=1)

    # ---- physics -----------------------------------------------------------------------------

    def _simulate(self, ctrl: np.ndarray) -> None:
        """Advance every row ``frame_skip`` physics steps under controls ``ctrl`` [N, nu]."""
        if self.steps_data:
            self._simulate_rows(ctrl)
            return
        self._control[:] = ctrl[:, None, :]  # rollout takes one control per physics step
        self._rollout.rollout(
            self._models,
            self._datas,
            self._state,
            self._control,
            control_spec=_CTRL,
            skip_checks=True,
            nstep=self.frame_skip,
            state=self._trajectory,
        )
        self._state[:] = self._trajectory[:, -1]

    def _simulate_rows(self, ctrl: np.ndarray) -> None:
        n, k = self.num_envs, len(self._datas)
        if self._pool is None or n < 2 * k:
            self._step_rows(self._datas[0], ctrl, 0, n)
            return
        bounds = [n * i // k for i in range(k + 1)]
        jobs = [
            self._pool.submit(self._step_rows, data, ctrl, lo, hi)
            for data, lo, hi in zip(self._datas, bounds[:-1], bounds[1:], strict=True)
        ]
        for job in jobs:
            job.result()

    def _step_rows(self, data: mujoco.MjData, ctrl: np.ndarray, lo: int, hi: int) -> None:
        """Rows lo..hi-1 one env step each, exactly as Gymnasium's ``do_simulation``."""
        m, spec, state = self.model, self._spec, self._state
        for i in range(lo, hi):
            mujoco.mj_setState(m, data, state[i], spec)
            mujoco.mj_setState(m, data, ctrl[i], _CTRL)
            mujoco.mj_step(m, data, self.frame_skip)
            # cacc, cfrc_int, cfrc_ext are only computed on demand (as Gymnasium does it).
            mujoco.mj_rnePostConstraint(m, data)
            mujoco.mj_getState(m, data, state[i], spec)
            self._read_data(data, i)

    def _init_data_fields(self) -> None:
        """Allocate what ``_read_data`` keeps per row (``steps_data`` tasks)."""

    def _read_data(self, data: mujoco.MjData, row: int) -> None:
        """Copy what the task needs from ``data`` after stepping ``row`` (``steps_data`` only)."""

    def _reset_data_fields(self, rows: np.ndarray | slice) -> None:
        """Reset what ``_read_data`` keeps for ``rows`` to its value after a Gymnasium reset."""

    # ---- VecEnv ------------------------------------------------------------------------------

    def _reset_rows(self, rows: np.ndarray | slice) -> None:
        n = self._state[rows].shape[0]
        scale = self.reset_noise_scale
        g = self.generator
        qpos_noise = torch.rand(n, self.nq, generator=g, dtype=torch.float64) * (2 * scale) - scale
        if self.qvel_noise == "normal":
            qvel = torch.randn(n, self.nv, generator=g, dtype=torch.float64) * scale
        else:
            qvel = torch.rand(n, self.nv, generator=g, dtype=torch.float64) * (2 * scale) - scale
        state = np.tile(self._reset_row, (n, 1))
        state[:, self._qpos] = self._init_qpos + qpos_noise.numpy()
        state[:, self._qvel] = qvel.numpy()  # init_qvel is zero
        self._state[rows] = state
        self._reset_data_fields(rows)

    def reset(self, seed: int | None = None) -> torch.Tensor:
        if seed is not None:
            self.generator.manual_seed(seed)
        self._reset_rows(slice(None))
        self.elapsed[:] = 0
        return self._to_device(self._observe(slice(None)))

    def set_state(
        self, qpos: np.ndarray, qvel: np.ndarray, qacc_warmstart: np.ndarray | None = None
    ) -> None:
        """Set every row's ``qpos`` [N, nq] and ``qvel`` [N, nv], as Gymnasium's ``set_state``.

        ``qacc_warmstart`` [N, nv] sets the constraint solver's warm start too, for tasks stepped
        row by row (``steps_data``); ``mujoco.rollout`` always starts a step from zero.
        """
        self._state[:, self._qpos] = qpos
        self._state[:, self._qvel] = qvel
        if qacc_warmstart is not None and self.steps_data:
            self._state[:, self._warmstart] = qacc_warmstart
        self._reset_data_fields(np.arange(self.num_envs))

    @property
    def qpos(self) -> np.ndarray:
        """Current ``qpos`` of every row, [N, nq] (a copy)."""
        return self._state[:, self._qpos].copy()

    @property
    def qvel(self) -> np.ndarray:
        """Current ``qvel`` of every row, [N, nv] (a copy)."""
        return self._state[:, self._qvel].copy()

    def _to_device(self, array: np.ndarray, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.from_numpy(array).to(self.device, dtype)

    def step(
        self, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        ctrl = actions.detach().to("cpu", torch.float64).numpy().reshape(self.num_envs, self.nu)
        x_before = self._forward_position().copy()
        self._simulate(ctrl)
        x_velocity = (self._forward_position() - x_before) / self.dt
        reward, terminated = self._reward_terminated(ctrl, x_velocity)
        final_obs = self._observe(slice(None))
        self.elapsed += 1
        self.total_steps += 1
        # Gymnasium's TimeLimit: truncated once elapsed >= limit, even on the terminating step.
        truncated = self.elapsed >= self.max_episode_steps
        done = terminated | truncated
        final_t = self._to_device(final_obs)
        obs_t = final_t
        if done.any():
            rows = np.flatnonzero(done)
            self._reset_rows(rows)
            self.elapsed[rows] = 0
            obs = final_obs.copy()
            obs[rows] = self._observe(rows)
            obs_t = self._to_device(obs)
        return (
            obs_t,
            self._to_device(reward),
            self._to_device(terminated, torch.bool),
            self._to_device(truncated, torch.bool),
            {"final_obs": final_t},
        )

    def state_dict(self) -> dict[str, Any]:
        return {
            "state": torch.from_numpy(self._state.copy()),
            "elapsed": torch.from_numpy(self.elapsed.copy()),
            "total_steps": self.total_steps,
            "max_episode_steps": self.max_episode_steps,
            "rng": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        expected = (self.num_envs, self.nstate)
        check_saved_shape(self, state["state"], expected)
        self._state[:] = state["state"].numpy()
        self.elapsed[:] = state["elapsed"].numpy()
        self.total_steps = int(state["total_steps"])
        self.max_episode_steps = int(state["max_episode_steps"])
        self.generator.set_state(state["rng"])

    def close(self) -> None:
        if self.steps_data:
            if self._pool is not None:
                self._pool.shutdown()
        else:
            self._rollout.close()


class HalfCheetah(MujocoVecEnv):
    """Gymnasium ``HalfCheetah-v5``: obs [qpos[1:], qvel] (17); 6 torques in [-1, 1].

    reward = dx/dt - 0.1 |a|^2; never terminates; truncated after 1000 steps.
    """

    xml_file = "half_cheetah.xml"
    frame_skip = 5
    ctrl_cost_weight = 0.1
    reset_noise_scale = 0.1
    qvel_noise = "normal"

    def _reward_terminated(
        self, ctrl: np.ndarray, x_velocity: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        reward = self.forward_reward_weight * x_velocity - self._ctrl_cost(ctrl)
        return reward, np.zeros(self.num_envs, dtype=bool)


class _Planar(MujocoVecEnv):
    """Hopper and Walker2d: obs [qpos[1:], clip(qvel, -10, 10)]; healthy reward 1; terminated
    when z = qpos[1] or the torso angle qpos[2] leaves its healthy range."""

    healthy_reward = 1.0
    ctrl_cost_weight = 1e-3
    reset_noise_scale = 5e-3
    qvel_noise = "uniform"
    healthy_z_range: tuple[float, float]
    healthy_angle_range: tuple[float, float]

    def _observe(self, rows: slice | np.ndarray) -> np.ndarray:
        s = self._state[rows]
        velocity = np.clip(s[:, self._qvel], -10.0, 10.0)
        return np.concatenate((s[:, self._qpos][:, 1:], velocity), axis=1)

    def _is_healthy(self) -> np.ndarray:
        qpos = self._state[:, self._qpos]
        healthy = _within(qpos[:, 1], *self.healthy_z_range)
        healthy &= _within(qpos[:, 2], *self.healthy_angle_range)
        return healthy

    def _reward_terminated(
        self, ctrl: np.ndarray, x_velocity: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        healthy = self._is_healthy()
        reward = self.forward_reward_weight * x_velocity + self.healthy_reward * healthy
        reward -= self._ctrl_cost(ctrl)
        return reward, ~healthy


class Hopper(_Planar):
    """Gymnasium ``Hopper-v5``: obs 11; 3 torques. Healthy: 0.7 < z, |angle| < 0.2 and every
    entry of [qpos[2:], qvel] within (-100, 100)."""

    xml_file = "hopper.xml"
    frame_skip = 4
    camera = {"distance": 3.0, "elevation": -20.0}
    healthy_z_range = (0.7, float("inf"))
    healthy_angle_range = (-0.2, 0.2)
    healthy_state_range = (-100.0, 100.0)

    def _is_healthy(self) -> np.ndarray:
        s = self._state
        state = np.concatenate((s[:, self._qpos][:, 2:], s[:, self._qvel]), axis=1)
        healthy = _within(state, *self.healthy_state_range).all(axis=1)
        return healthy & super()._is_healthy()


class Walker2d(_Planar):
    """Gymnasium ``Walker2d-v5`` (its v5 model, both feet with friction 0.9): obs 17;
    6 torques. Healthy: 0.8 < z < 2 and |angle| < 1."""

    xml_file = "walker2d_v5.xml"
    frame_skip = 4
    camera = {"distance": 4.0, "elevation": -20.0}
    healthy_z_range = (0.8, 2.0)
    healthy_angle_range = (-1.0, 1.0)


class Ant(MujocoVecEnv):
    """Gymnasium ``Ant-v5``: obs [qpos[2:], qvel, clip(cfrc_ext[1:], -1, 1)] (105); 8 torques.

    reward = dx/dt (torso) + 1 (healthy) - 0.5 |a|^2 - 5e-4 |clip(cfrc_ext, -1, 1)|^2;
    terminated when the state is not finite or the torso's z leaves [0.2, 1.0].
    """

    xml_file = "ant.xml"
    frame_skip = 5
    ctrl_cost_weight = 0.5
    contact_cost_weight = 5e-4
    healthy_reward = 1.0
    healthy_z_range = (0.2, 1.0)
    contact_force_range = (-1.0, 1.0)
    reset_noise_scale = 0.1
    qvel_noise = "normal"
    obs_qpos_skip = 2
    main_body = 1  # the torso
    steps_data = True

    def _init_data_fields(self) -> None:
        self._cfrc_ext = np.zeros((self.num_envs, self.model.nbody, 6))
        self._torso_xy = np.zeros((self.num_envs, 2))

    def _reset_data_fields(self, rows: np.ndarray | slice) -> None:
        # After reset, mj_forward has not computed cfrc_ext (zero), and the torso's frame is at
        # its free joint's position.
        self._cfrc_ext[rows] = 0.0
        self._torso_xy[rows] = self._state[rows, self._qpos.start : self._qpos.start + 2]

    def _read_data(self, data: mujoco.MjData, row: int) -> None:
        self._cfrc_ext[row] = data.cfrc_ext
        self._torso_xy[row] = data.xpos[self.main_body, :2]

    def _forward_position(self) -> np.ndarray:
        # Gymnasium reads the torso's xpos, which mj_step leaves at the last Runge-Kutta stage of
        # its last substep (not at qpos[0]); kept per row in _torso_xy by _read_data.
        return self._torso_xy[:, 0]

    def _contact_forces(self, rows: slice | np.ndarray) -> np.ndarray:
        return np.clip(self._cfrc_ext[rows], *self.contact_force_range)

    def _observe(self, rows: slice | np.ndarray) -> np.ndarray:
        contact = self._contact_forces(rows)[:, 1:]
        return np.concatenate((super()._observe(rows), contact.reshape(len(contact), -1)), 1)

    def _reward_terminated(
        self, ctrl: np.ndarray, x_velocity: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        s = self._state
        finite = np.isfinite(s[:, self._qpos]).all(axis=1) & np.isfinite(s[:, self._qvel]).all(1)
        z = s[:, self._qpos.start + 2]
        healthy = finite & _within(z, *self.healthy_z_range, inclusive=True)
        contact_cost = self.contact_cost_weight * np.square(self._contact_forces(slice(None)))
        reward = self.forward_reward_weight * x_velocity + self.healthy_reward * healthy
        reward -= self._ctrl_cost(ctrl) + contact_cost.sum(axis=(1, 2))
        return reward, ~healthy

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "cfrc_ext": torch.from_numpy(self._cfrc_ext.copy()),
            "torso_xy": torch.from_numpy(self._torso_xy.copy()),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._cfrc_ext[:] = state["cfrc_ext"].numpy()
        self._torso_xy[:] = state["torso_xy"].numpy()


ENVS: dict[str, type[MujocoVecEnv]] = {
    "HalfCheetah-v5": HalfCheetah,
    "Hopper-v5": Hopper,
    "Walker2d-v5": Walker2d,
    "Ant-v5": Ant,
}
"""The batched env of each Gymnasium id it reproduces."""
