"""Meta-World MT10 (Yu et al. 2019, "Meta-World: A Benchmark and Evaluation for Multi-Task and
Meta Reinforcement Learning") as an ``EpisodicVecEnv``: state observations, success from
``info["success"]``, and each task's 50 goal variants as its init-state list.

Needs the ``metaworld`` extra (``pip install 'distrl[metaworld]'``: metaworld 3.1.1, which pins
mujoco 3.3.0; headless, CPU). The simulator is per env, so rows are stepped in a Python loop and
observations are converted to one tensor per step.

Episodes follow the suite convention of ``envs.reach``: reward 1 on the step that succeeds,
which terminates the episode; truncated after ``max_episode_steps`` (at most Meta-World's 500).
``reward="dense"`` gives Meta-World's own episodes instead, for PPO: its shaped reward (up to 10
per step), no termination (success is reported in ``info["success"]`` and the episode goes on,
as Meta-World's MT benchmarks run it), so the env is then a plain VecEnv, not an episodic one.
Observation: Meta-World's 39 state values (goal visible, as in its MT benchmarks), then a
one-hot task id over the ten MT10 tasks unless ``one_hot=False``. ``task`` is one task name for
every row, or one name per row (a mixed batch: ``metaworld-mt10-ppo`` cycles the ten tasks).

``reset_rows`` starts row i from goal variant ``init_indices[i]``: ``set_task`` then ``reset``
(object and goal positions are fixed by the variant). Training's variants are MT10's with
benchmark seed 0; the held-out ones (``held_out=True``, what evaluation runs) are those of seed
``HELD_OUT_BENCHMARK_SEED``: Meta-World draws the 50 positions from that seed, so they differ.
Auto-resets draw a variant from the env's generator. Simulator state is not checkpointed: after
a resume, episodes start afresh.
"""

from __future__ import annotations

import functools
import importlib
import math
import types
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from distrl.envs.core import ActionSpace
from distrl.envs.episodic import EpisodicVecEnv

MT10_TASKS: tuple[str, ...] = (
    "reach-v3",
    "push-v3",
    "pick-place-v3",
    "door-open-v3",
    "drawer-open-v3",
    "drawer-close-v3",
    "button-press-topdown-v3",
    "peg-insert-side-v3",
    "window-open-v3",
    "window-close-v3",
)
INSTALL_HINT = "pip install 'distrl[metaworld]'  (metaworld==3.1.1 with mujoco==3.3.0)"
STATE_DIM = 39
HELD_OUT_BENCHMARK_SEED = 1


def _metaworld() -> Any:
    try:
        import metaworld
    except ImportError as e:
        raise ImportError(
            f"the Meta-World tasks need the metaworld package, which is not installed: "
            f"{INSTALL_HINT}"
        ) from e
    return metaworld


@functools.cache
def mt10_benchmark(seed: int = 0) -> Any:
    """The MT10 benchmark with its 50 goal variants per task, drawn with ``seed`` (built once
    per process: constructing it resets every task 50 times)."""
    return _metaworld().MT10(seed=seed)


# --- Exact fast paths ------------------------------------------------------------------------
# Per env step Meta-World spends most of its time in Python around mj_step: a list comprehension
# over every contact (``touching_object``), scipy's ``Rotation`` for one 3x3 matrix
# (``_get_quat_objects`` of five MT10 tasks), ``reward_utils.tolerance`` on 0-d arrays,
# ``np.split``/``np.hstack``/``np.clip`` wrappers for a 39-value observation, and a name lookup
# on each body or site access. ``_ExactFastPaths`` overrides those methods with code doing the
# same floating-point operations in the same order, and ``_fast_env_class`` mixes it into a
# task's class, rebinding the task's reward methods to a fast ``tolerance``. Observations,
# rewards, success and truncation are bitwise those of unmodified Meta-World 3.1.1 with scipy
# 1.17 (tests/envs/test_meta_world_speed.py checks all ten tasks); Meta-World is not modified.

# What each MT10 task's ``_get_quat_objects`` returns: ("geom" | "site", name) for
# ``Rotation.from_matrix(<its xmat>).as_quat()``, ("body", name) for ``data.body(name).xquat``;
# the tasks not listed return zeros (left as they are).
_QUAT_SOURCES: dict[str, tuple[str, str]] = {
    "reach-v3": ("geom", "objGeom"),
    "push-v3": ("geom", "objGeom"),
    "pick-place-v3": ("geom", "objGeom"),
    "door-open-v3": ("geom", "handle"),
    "drawer-open-v3": ("body", "drawer_link"),
    "button-press-topdown-v3": ("body", "button"),
    "peg-insert-side-v3": ("site", "pegGrasp"),
}


def _scipy_quat_from_matrix(xmat: np.ndarray) -> np.ndarray:
    """``Rotation.from_matrix(xmat.reshape(3, 3)).as_quat()`` (scipy 1.17, Cython backend) for
    one row-major rotation matrix: the same arithmetic in the same order, giving the same bits and
    sign (x, y, z, w; not canonicalised). A matrix scipy would re-orthogonalise by SVD or reject
    (never MuJoCo's xmat in practice) is handed to scipy itself."""
    m = xmat.tolist()
    r0, r1, r2 = m[0:3], m[3:6], m[6:9]
    # scipy skips its SVD when m @ m.T is within atol 1e-12 (off-diagonal) and 1e-5 (diagonal)
    # of the identity, and rejects det <= 0. A 10x stricter check keeps our decision on the same
    # side as scipy's despite rounding differences; anything else goes to scipy.
    off = (
        abs(r0[0] * r1[0] + r0[1] * r1[1] + r0[2] * r1[2]),
        abs(r0[0] * r2[0] + r0[1] * r2[1] + r0[2] * r2[2]),
        abs(r1[0] * r2[0] + r1[1] * r2[1] + r1[2] * r2[2]),
    )
    diag = (
        abs(r0[0] * r0[0] + r0[1] * r0[1] + r0[2] * r0[2] - 1.0),
        abs(r1[0] * r1[0] + r1[1] * r1[1] + r1[2] * r1[2] - 1.0),
        abs(r2[0] * r2[0] + r2[1] * r2[1] + r2[2] * r2[2] - 1.0),
    )
    det = (
        r0[0] * (r1[1] * r2[2] - r1[2] * r2[1])
        - r0[1] * (r1[0] * r2[2] - r1[2] * r2[0])
        + r0[2] * (r1[0] * r2[1] - r1[1] * r2[0])
    )
    if not (max(off) <= 1e-13 and max(diag) <= 1e-6 and det > 0.5):
        rotation = importlib.import_module("scipy.spatial.transform").Rotation
        quat: np.ndarray = rotation.from_matrix(xmat.reshape(3, 3)).as_quat()
        return quat
    # scipy's _from_matrix_orthogonal: the largest of (m00, m11, m22, trace), first on ties.
    mat = (r0, r1, r2)
    trace = r0[0] + r1[1] + r2[2]
    decision = (r0[0], r1[1], r2[2], trace)
    choice, best = 0, decision[0]
    for c in (1, 2, 3):
        if decision[c] > best:
            choice, best = c, decision[c]
    q = [0.0, 0.0, 0.0, 0.0]
    if choice != 3:
        i = choice
        j = (i + 1) % 3
        k = (j + 1) % 3
        q[i] = 1 - trace + 2 * mat[i][i]
        q[j] = mat[j][i] + mat[i][j]
        q[k] = mat[k][i] + mat[i][k]
        q[3] = mat[k][j] - mat[j][k]
    else:
        q[0] = r2[1] - r1[2]
        q[1] = r0[2] - r2[0]
        q[2] = r1[0] - r0[1]
        q[3] = 1 + trace
    norm = math.sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3])
    if norm != 0:  # scipy leaves a zero quaternion as it is
        q = [q[0] / norm, q[1] / norm, q[2] / norm, q[3] / norm]
    return np.array(q)


class _ExactFastPaths:
    """Overrides of ``SawyerXYZEnv`` methods (mixed in before the task's class), each computing
    exactly what the original computes. Ids of named bodies, sites and geoms are looked up once.
    Views stay views: ``get_body_com`` returns the same live row of ``data.xpos``."""

    data: Any
    model: Any
    _quat_source: tuple[str, str] | None = None
    _set_task_called: bool
    _did_see_sim_exception: bool
    _partially_observable: bool
    _prev_obs: np.ndarray
    _last_stable_obs: np.ndarray
    curr_path_length: int
    max_path_length: int
    frame_skip: int
    action_scale: float
    mocap_low: np.ndarray
    mocap_high: np.ndarray
    sawyer_observation_space: Any
    _target_site_config: list[tuple[str, np.ndarray]]

    # Provided by Meta-World's classes, after this one in the MRO.
    _get_pos_goal: Any
    _get_pos_objects: Any
    _step_mujoco_simulation: Any
    evaluate_state: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._ids: dict[tuple[str, str], int] = {}
        super().__init__(*args, **kwargs)

    def _id(self, kind: str, name: str) -> int:
        try:
            return self._ids[kind, name]
        except KeyError:
            i: int = getattr(self.model, kind)(name).id  # KeyError for unknown names
            self._ids[kind, name] = i
            return i

    def get_body_com(self, body_name: str) -> np.ndarray:
        xpos: np.ndarray = self.data.xpos[self._id("body", body_name)]
        return xpos

    def get_endeff_pos(self) -> np.ndarray:
        return self.get_body_com("hand")

    def _get_site_pos(self, site_name: str) -> np.ndarray:
        xpos: np.ndarray = self.data.site_xpos[self._id("site", site_name)].copy()
        return xpos

    def _set_pos_site(self, name: str, pos: np.ndarray) -> None:
        assert isinstance(pos, np.ndarray)
        assert pos.ndim == 1
        self.data.site_xpos[self._id("site", name)] = pos[:3]

    @property
    def tcp_center(self) -> np.ndarray:
        xpos = self.data.site_xpos
        right = xpos[self._id("site", "rightEndEffector")]
        left = xpos[self._id("site", "leftEndEffector")]
        center: np.ndarray = (right + left) / 2.0
        return center

    def step(self, action: np.ndarray) -> tuple[np.ndarray, Any, bool, bool, dict[str, Any]]:
        # SawyerXYZEnv.step, minus per-call overhead: np.clip's dispatch wrappers (ndarray.clip
        # runs the same ufunc) and do_simulation's ctrl shape check (nu is 2 in every task).
        if not self._set_task_called:
            raise RuntimeError("You must call env.set_task before using env.step")
        if self._did_see_sim_exception:  # never set by Meta-World 3.1.1; keep its handling
            return super().step(action)  # type: ignore[misc]
        assert len(action) == 4, f"Actions should be size 4, got {len(action)}"
        self.set_xyz_action(action[:3])
        if self.curr_path_length >= self.max_path_length:
            raise ValueError("You must reset the env manually once truncate==True")
        self._step_mujoco_simulation([action[-1], -action[-1]], self.frame_skip)
        self.curr_path_length += 1
        for site in self._target_site_config:
            self._set_pos_site(*site)
        _mujoco().mj_forward(self.model, self.data)
        space = self.sawyer_observation_space
        obs = self._get_obs().clip(space.low, space.high, dtype=np.float64)
        self._last_stable_obs = obs
        reward, info = self.evaluate_state(obs, action)
        truncate = self.curr_path_length == self.max_path_length
        return np.array(obs, dtype=np.float64), reward, False, truncate, info

    def set_xyz_action(self, action: np.ndarray) -> None:
        action = np.asarray(action).clip(-1, 1)
        pos_delta = action * self.action_scale
        new_mocap_pos = self.data.mocap_pos + pos_delta[None]
        new_mocap_pos[0, :] = new_mocap_pos[0, :].clip(self.mocap_low, self.mocap_high)
        self.data.mocap_pos = new_mocap_pos
        self.data.mocap_quat = np.array([1, 0, 1, 0])

    def _get_obs(self) -> np.ndarray:
        pos_goal = self._get_pos_goal()
        if self._partially_observable:
            pos_goal = np.zeros_like(pos_goal)
        curr_obs = self._get_curr_obs_combined_no_goal()
        obs = np.concatenate((curr_obs, self._prev_obs, pos_goal))  # np.hstack of 1-D arrays
        self._prev_obs = curr_obs
        return obs

    def touching_object(self, object_geom_id: int) -> bool:
        # Both pads' summed contact force with the object is positive; the sums run over the
        # contacts in order, as the original's Python sum does.
        contact = self.data.contact  # the data.ncon active contacts
        g1, g2, addr = contact.geom1, contact.geom2, contact.efc_address
        force = self.data.efc_force
        with_object = (g1 == object_geom_id) | (g2 == object_geom_id)
        sums = []
        for pad in ("leftpad_geom", "rightpad_geom"):
            pad_id = self._id("geom", pad)
            on_pad = with_object & ((g1 == pad_id) | (g2 == pad_id))
            sums.append(sum(force[addr[on_pad]].tolist()))
        return sums[0] > 0 and sums[1] > 0

    def _get_quat_objects(self) -> np.ndarray:
        if self._quat_source is None:
            quat: np.ndarray = super()._get_quat_objects()  # type: ignore[misc]
            return quat
        kind, name = self._quat_source
        if kind == "body":
            xquat: np.ndarray = self.data.xquat[self._id(kind, name)]  # a view, as the original's
            return xquat
        return _scipy_quat_from_matrix(getattr(self.data, kind + "_xmat")[self._id(kind, name)])

    def _get_curr_obs_combined_no_goal(self) -> np.ndarray:
        # hand xyz, gripper opening, then (pos, quat) per object padded to 14 values.
        xpos = self.data.xpos
        apart = xpos[self._id("body", "rightclaw")] - xpos[self._id("body", "leftclaw")]
        opening = math.sqrt(apart.dot(apart)) / 0.1  # np.linalg.norm's formula for a vector
        pos, quat = self._get_pos_objects(), self._get_quat_objects()
        assert len(pos) % 3 == 0
        assert len(quat) % 4 == 0
        n = len(pos) // 3
        if len(quat) // 4 != n:
            curr: np.ndarray = super()._get_curr_obs_combined_no_goal()  # type: ignore[misc]
            return curr
        obs = np.zeros(18)
        obs[:3] = self.get_endeff_pos()
        obs[3] = min(max(opening, 0.0), 1.0)  # np.clip, NaN included
        for k in range(n):
            obs[4 + 7 * k : 7 + 7 * k] = pos[3 * k : 3 * k + 3]
            obs[7 + 7 * k : 11 + 7 * k] = quat[4 * k : 4 * k + 4]
        return obs


def _mujoco() -> Any:
    import mujoco

    return mujoco


@functools.cache
def _fast_reward_utils() -> Any:
    """Meta-World's ``reward_utils`` with an exact fast ``tolerance`` for scalar arguments: the
    original runs np.logical_and/np.where on 0-d arrays; this does the same comparisons and the
    same float64 arithmetic on scalars, then Meta-World's own ``_sigmoids``."""
    from metaworld.utils import reward_utils

    scalar = (int, float, np.float64)

    def tolerance(
        x: Any,
        bounds: tuple[Any, Any] = (0.0, 0.0),
        margin: Any = 0.0,
        sigmoid: Any = "gaussian",
        value_at_margin: float = 0.1,
    ) -> Any:
        lower, upper = bounds
        if not (
            type(x) in (float, np.float64)
            and type(lower) in scalar
            and type(upper) in scalar
            and type(margin) in scalar
            and lower <= upper
            and margin >= 0
            and sigmoid in ("long_tail", "gaussian")
            and 0 < value_at_margin < 1
        ):  # arrays, other types and invalid arguments (the original raises)
            return reward_utils.tolerance(x, bounds, margin, sigmoid, value_at_margin)
        if lower <= x <= upper:
            return 1.0
        if margin == 0:
            return 0.0
        d = np.float64(lower - x if x < lower else x - upper) / margin
        return float(reward_utils._sigmoids(d, value_at_margin, sigmoid))

    return types.SimpleNamespace(**{**vars(reward_utils), "tolerance": tolerance})


@functools.cache
def _fast_env_class(task: str, env_cls: type) -> type:
    """``env_cls`` with ``_ExactFastPaths`` mixed in (one class per task), and its methods that
    call ``reward_utils`` (each task's reward code) replaced by copies whose global
    ``reward_utils`` has the fast exact ``tolerance``; in those copies the task's class name
    means the new class (door's ``compute_reward`` calls ``SawyerDoorEnvV3._reward_pos``)."""
    namespace: dict[str, Any] = {
        "_quat_source": _QUAT_SOURCES.get(task),
        "__module__": __name__,
    }
    scopes: dict[int, dict[str, Any]] = {}  # a copy of each defining module's globals
    seen = set(vars(_ExactFastPaths))
    for klass in env_cls.__mro__:
        for name, attr in vars(klass).items():
            if name in seen:
                continue
            seen.add(name)
            fn = attr.__func__ if isinstance(attr, staticmethod) else attr
            if isinstance(fn, types.FunctionType) and "reward_utils" in fn.__code__.co_names:
                scope = scopes.setdefault(
                    id(fn.__globals__), {**fn.__globals__, "reward_utils": _fast_reward_utils()}
                )
                fast = types.FunctionType(
                    fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__
                )
                fast.__kwdefaults__, fast.__qualname__ = fn.__kwdefaults__, fn.__qualname__
                namespace[name] = staticmethod(fast) if fn is not attr else fast
    cls = type(env_cls.__name__, (_ExactFastPaths, env_cls), namespace)
    for scope in scopes.values():
        if scope.get(env_cls.__name__) is env_cls:
            scope[env_cls.__name__] = cls
    return cls


class MetaWorldMT10(EpisodicVecEnv):
    """``num_envs`` MT10 envs: copies of one task, or row i running ``task[i]``. Actions
    [N, 4] in [-1, 1] (clipped). The envs use the exact fast paths above unless
    ``fast_paths=False`` (unmodified Meta-World)."""

    num_init_states = 50

    def __init__(
        self,
        task: str | Sequence[str],
        num_envs: int,
        device: torch.device | str = "cpu",
        max_episode_steps: int | None = None,
        benchmark_seed: int = 0,
        reward: str = "success",
        one_hot: bool = True,
        held_out: bool = False,
        fast_paths: bool = True,
    ) -> None:
        row_tasks = [task] * num_envs if isinstance(task, str) else list(task)
        if len(row_tasks) != num_envs:
            raise ValueError(f"{len(row_tasks)} task names for {num_envs} envs; give one per env")
        unknown = sorted(set(row_tasks) - set(MT10_TASKS))
        if unknown:
            raise ValueError(f"unknown MT10 task {unknown[0]!r}; tasks: {', '.join(MT10_TASKS)}")
        if reward not in ("success", "dense"):
            raise ValueError(f"reward must be 'success' or 'dense', got {reward!r}")
        bench = mt10_benchmark(HELD_OUT_BENCHMARK_SEED if held_out else benchmark_seed)
        self.task, self.reward_mode, self.row_tasks = task, reward, row_tasks
        names = sorted(set(row_tasks), key=MT10_TASKS.index)
        self._variants = {t: [v for v in bench.train_tasks if v.env_name == t] for t in names}
        self.variants = self._variants[row_tasks[0]]  # (one task: its goal variants)
        self.num_init_states = min(len(v) for v in self._variants.values())
        # fast_paths: bitwise the same, ~2-3x faster
        classes = {
            t: _fast_env_class(t, bench.train_classes[t]) if fast_paths else bench.train_classes[t]
            for t in names
        }
        self.envs = [classes[t]() for t in row_tasks]
        limit = min(env.max_path_length for env in self.envs)
        self.max_episode_steps = limit if max_episode_steps is None else max_episode_steps
        if not 1 <= self.max_episode_steps <= limit:
            raise ValueError(f"max_episode_steps must be in 1..{limit}, got {max_episode_steps}")
        self.num_envs, self.device = num_envs, torch.device(device)
        width = len(MT10_TASKS) if one_hot else 0
        self.obs_dim = STATE_DIM + width
        self.action_space = ActionSpace("continuous", low=(-1.0,) * 4, high=(1.0,) * 4)
        self.generator = torch.Generator().manual_seed(0)
        self.elapsed = np.zeros(num_envs, dtype=np.int64)
        self._obs = np.zeros((num_envs, self.obs_dim), dtype=np.float32)
        if one_hot:
            self._obs[np.arange(num_envs), [STATE_DIM + MT10_TASKS.index(t) for t in row_tasks]] = 1
        self._start(range(num_envs), [0] * num_envs)

    def _start(self, rows: Any, variants: Any) -> None:
        for row, v in zip(rows, variants, strict=True):
            env = self.envs[row]
            env.set_task(self._variants[self.row_tasks[row]][int(v)])
            obs, _ = env.reset()
            self._obs[row, :STATE_DIM] = obs
            self.elapsed[row] = 0

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(array.copy()).to(self.device)

    def _random_variants(self, n: int) -> list[int]:
        return torch.randint(self.num_init_states, (n,), generator=self.generator).tolist()

    def reset(self, seed: int | None = None) -> torch.Tensor:
        if seed is not None:
            self.generator.manual_seed(seed)
        self._start(range(self.num_envs), self._random_variants(self.num_envs))
        return self._tensor(self._obs)

    def reset_rows(self, mask: torch.Tensor, init_indices: torch.Tensor) -> torch.Tensor:
        rows = mask.nonzero().flatten().tolist()
        self._start(rows, init_indices.cpu()[rows].tolist())
        return self._tensor(self._obs)

    def step(
        self, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        acts = actions.detach().to("cpu", torch.float32).clamp(-1.0, 1.0).numpy()
        N = self.num_envs
        reward = np.zeros(N, dtype=np.float32)
        success = np.zeros(N, dtype=bool)
        for row, env in enumerate(self.envs):
            obs, dense, _, _, info = env.step(acts[row])
            self._obs[row, :STATE_DIM] = obs
            success[row] = info["success"] > 0.5
            reward[row] = dense if self.reward_mode == "dense" else float(success[row])
        self.elapsed += 1
        truncated = self.elapsed >= self.max_episode_steps
        final_obs = self._tensor(self._obs)
        terminated = success if self.reward_mode == "success" else np.zeros_like(success)
        done = (terminated | truncated).nonzero()[0]
        self._start(done, self._random_variants(len(done)))
        info = {"final_obs": final_obs, "success": self._tensor(success)}
        return (
            self._tensor(self._obs),
            self._tensor(reward),
            self._tensor(terminated),
            self._tensor(truncated),
            info,
        )

    def close(self) -> None:
        for env in self.envs:
            env.close()
