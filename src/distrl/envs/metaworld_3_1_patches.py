"""Speed patches of Meta-World 3.1.1's internals, exact: ``fast_env_class(task, cls)`` is a
task's class with these methods overridden by code doing the same floating-point operations in
the same order, so observations, rewards, success and truncation are bitwise those of
unmodified Meta-World 3.1.1 with scipy 1.17 (tests/envs/test_meta_world_speed.py checks all ten
MT10 tasks); Meta-World itself is not modified. Named for the version it patches: a new
Meta-World release needs these checked again (the tests do it).

"""

from __future__ import annotations

import functools
import importlib
import math
import struct
import types
from collections.abc import Sequence
from typing import Any

import numpy as np

# --- Exact fast paths ------------------------------------------------------------------------
# Per env step Meta-World spends most of its time in Python around mj_step: a list comprehension
# over every contact (``touching_object``), scipy's ``Rotation`` for one 3x3 matrix
# (``_get_quat_objects`` of five MT10 tasks), ``reward_utils.tolerance`` on 0-d arrays,
# ``np.split``/``np.hstack``/``np.clip`` wrappers for a 39-value observation, and a name lookup
# on each body or site access. ``_ExactFastPaths`` overrides those methods with code doing the
# same floating-point operations in the same order, and ``fast_env_class`` mixes it into a
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

# What each MT10 task's ``_get_pos_objects`` returns: the xpos row of a body, site or geom
# (``get_body_com``, ``_get_site_pos``, ``data.geom(name).xpos``), plus a constant offset where
# the task adds ``np.array(offset)`` (all three components, zeros included: -0.0 + 0.0 is +0.0).
_POS_SOURCES: dict[str, tuple[str, str, tuple[float, float, float] | None]] = {
    "reach-v3": ("body", "obj", None),
    "push-v3": ("body", "obj", None),
    "pick-place-v3": ("body", "obj", None),
    "door-open-v3": ("geom", "handle", None),
    "drawer-open-v3": ("body", "drawer_link", (0.0, -0.16, 0.0)),
    "drawer-close-v3": ("body", "drawer_link", (0.0, -0.16, 0.05)),
    "button-press-topdown-v3": ("body", "button", (0.0, 0.0, 0.193)),
    "peg-insert-side-v3": ("site", "pegGrasp", None),
    "window-open-v3": ("site", "handleOpenStart", None),
    "window-close-v3": ("site", "handleCloseStart", None),
}
# The MT10 tasks whose ``_get_quat_objects`` is ``np.zeros(4)``.
_ZERO_QUAT_TASKS = frozenset({"drawer-close-v3", "window-open-v3", "window-close-v3"})

# reward_utils._sigmoids' scales for value_at_1=0.1 (what every MT10 reward uses), computed by
# the same numpy expressions: long_tail sqrt(1/0.1 - 1) (3.0), gaussian sqrt(-2 log 0.1).
_LONG_TAIL_SCALE = float(np.sqrt(1 / 0.1 - 1))
_GAUSSIAN_SCALE = float(np.sqrt(-2 * np.log(0.1)))
_FLOAT32X3 = struct.Struct("=3f")  # packs by a C cast to float: float32's round to nearest


def _clip(x: float, lo: float, hi: float) -> float:
    """numpy's float clip, ``Min(Max(x, lo), hi)`` with ``Max(a, b) = a if isnan(a) or a > b
    else b`` (and Min alike): a tie returns the bound, NaN stays NaN."""
    t = lo if lo >= x else x
    return hi if hi <= t else t


@functools.cache
def _dot_is_sequential() -> bool:
    """Whether this process's numpy computes ``v.dot(v)`` of a float64 3-vector as
    ``((0.0 + v0 * v0) + v1 * v1) + v2 * v2`` with each product rounded. It goes to OpenBLAS's
    ddot, whose loop for n < 16 is that sum; whether the compiler fused it into FMAs depends on
    the kernel picked for the CPU (DYNAMIC_ARCH), so it is checked, once, on 4096 random vectors
    (fused products, or another order, differ on a large share of them)."""
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((4096, 3)) * 10.0 ** rng.uniform(-4, 1, (4096, 1))
    want = np.array([v.dot(v) for v in vectors])
    got = np.array([((0.0 + a * a) + b * b) + c * c for a, b, c in vectors.tolist()])
    return bool(np.array_equal(want.view(np.int64), got.view(np.int64)))


def _squared_norms(rows: Sequence[Sequence[float]]) -> list[float]:
    """``v.dot(v)`` of each float64 3-vector (``np.linalg.norm(v)`` is ``sqrt(v.dot(v))``, and
    numpy's sqrt, like math.sqrt, is correctly rounded): in Python where numpy's dot is that
    sequential sum (_dot_is_sequential), else by np.vecdot, which runs numpy's DOUBLE_dot per
    row, the very function ``ndarray.dot`` of two vectors calls."""
    if _dot_is_sequential():
        return [((0.0 + a * a) + b * b) + c * c for a, b, c in rows]
    array = np.array(rows, dtype=np.float64)
    sq: list[float] = np.vecdot(array, array).tolist()
    return sq


def _tolerance(x: float, upper: float, margin: float, gaussian: bool) -> float:
    """``reward_utils.tolerance(x, bounds=(0, upper), margin, sigmoid)`` (value_at_margin 0.1,
    long_tail or gaussian) for a float ``x`` and ``upper``, ``margin`` >= 0 (or NaN), as the
    original computes it on 0-d arrays: the same comparisons, the same float64 arithmetic
    (``** 2`` is C pow for numpy float64 scalars and Python floats alike), numpy's exp."""
    if 0 <= x <= upper:
        return 1.0
    if margin == 0:
        return 0.0
    d = (0 - x if x < 0 else x - upper) / margin
    if gaussian:
        return float(np.exp(-0.5 * (d * _GAUSSIAN_SCALE) ** 2))
    return 1 / ((d * _LONG_TAIL_SCALE) ** 2 + 1)


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
    _pos_source: tuple[str, str, tuple[float, float, float] | None] | None = None
    _zero_quat: bool = False
    _fast_reward: Any = None  # (env, obs, pos, obs_array, action) -> (reward, info), per task
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
        self._views: tuple[Any, ...] | None = None
        self._tcp_views: tuple[np.ndarray, int, int] | None = None
        self._obs_bounds: tuple[Any, list[tuple[int, float, float]]] | None = None
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
        # SawyerXYZEnv.step on Python floats: each value of the original's small arrays computed
        # by the same IEEE operation in the same order (in float32 where the original's is),
        # numpy's clip semantics (_clip), its dot's sums for the norms (_squared_norms). Minus
        # per-call overhead: np.clip/np.hstack wrappers, do_simulation's ctrl shape check (nu is
        # 2), and the write of each target site's xpos before mj_forward, whose mj_kinematics
        # recomputes every site_xpos from the model (the goal site's model pos is set at reset),
        # so the write never reaches a result.
        if not self._set_task_called:
            raise RuntimeError("You must call env.set_task before using env.step")
        if self._did_see_sim_exception:  # never set by Meta-World 3.1.1; keep its handling
            return super().step(action)  # type: ignore[misc]
        assert len(action) == 4, f"Actions should be size 4, got {len(action)}"
        views = self._views
        if views is None or views[0] is not self.data:
            views = self._make_views()
        scale = self.action_scale
        if (
            views[1] is None
            or type(action) is not np.ndarray
            or action.ndim != 1
            or action.dtype.char not in ("f", "d")
            or type(scale) is not float
        ):
            return self._step_arrays(action)
        (data, model, mj, xpos, mocap_pos, mocap_quat, ctrl, hand, right, left, obj, quat) = views
        # set_xyz_action: np.clip(action[:3], -1, 1) * action_scale, in float32 for a float32
        # action (NEP 50 casts the Python float to float32): the double product of two float32
        # values is exact, so rounding it to float32 gives numpy's product.
        x, y, z, grip = action.tolist()
        x, y, z = _clip(x, -1.0, 1.0), _clip(y, -1.0, 1.0), _clip(z, -1.0, 1.0)
        if action.dtype.char == "f":
            (s,) = struct.unpack("=f", struct.pack("=f", scale))
            x, y, z = _FLOAT32X3.unpack(_FLOAT32X3.pack(x * s, y * s, z * s))
        else:
            x, y, z = x * scale, y * scale, z * scale
        m0, m1, m2 = mocap_pos[0].tolist()
        lo0, lo1, lo2 = self.mocap_low.tolist()
        hi0, hi1, hi2 = self.mocap_high.tolist()
        mocap_pos[0] = (_clip(m0 + x, lo0, hi0), _clip(m1 + y, lo1, hi1), _clip(m2 + z, lo2, hi2))
        mocap_quat[0] = (1.0, 0.0, 1.0, 0.0)
        if self.curr_path_length >= self.max_path_length:
            raise ValueError("You must reset the env manually once truncate==True")
        ctrl[0] = grip  # ctrl[:] = [action[-1], -action[-1]]: float32 negation is exact
        ctrl[1] = -grip
        mj.mj_step(model, data, self.frame_skip)
        mj.mj_rnePostConstraint(model, data)
        self.curr_path_length += 1
        mj.mj_forward(model, data)
        # _get_obs: hand xyz, gripper opening, object pos and quat padded to 14, the previous
        # ones, goal; then np.clip to the observation space, whose infinite bounds leave a value
        # as it is (NaN included), so only the finite ones are applied.
        r0, r1, r2 = xpos[right].tolist()
        l0, l1, l2 = xpos[left].tolist()
        (apart,) = _squared_norms(((r0 - l0, r1 - l1, r2 - l2),))
        rows, row, offset = obj
        pos = rows[row].tolist()
        if offset is not None:
            pos = [pos[0] + offset[0], pos[1] + offset[1], pos[2] + offset[2]]
        curr = xpos[hand].tolist()
        curr.append(_clip(math.sqrt(apart) / 0.1, 0.0, 1.0))
        curr += pos
        curr += [0.0, 0.0, 0.0, 0.0] if quat is None else quat(self)
        curr += (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        pos_goal = self._get_pos_goal()
        goal = [0.0, 0.0, 0.0] if self._partially_observable else pos_goal.tolist()
        obs = curr + self._prev_obs.tolist() + goal
        space = self.sawyer_observation_space
        bounds = self._obs_bounds
        if bounds is None or bounds[0] is not space:
            bounds = self._obs_bounds = self._finite_bounds(space)
        for i, lo, hi in bounds[1]:
            v = obs[i]
            v = lo if lo >= v else v
            obs[i] = hi if hi <= v else v
        obs_array = np.array(obs, dtype=np.float64)
        self._prev_obs = np.array(curr, dtype=np.float64)
        self._last_stable_obs = obs_array
        if self._fast_reward is None:
            reward, info = self.evaluate_state(obs_array, action)
        else:
            reward, info = self._fast_reward(obs, pos, obs_array, action)
        truncate = self.curr_path_length == self.max_path_length
        return obs_array.copy(), reward, False, truncate, info

    def _make_views(self) -> tuple[Any, ...]:
        """What ``step`` reads and writes: views into this ``data`` (fixed for its life), ids;
        ``views[1]`` is None where the scalar step does not apply."""
        data, model = self.data, self.model
        plain = (
            self._pos_source is not None
            and getattr(self, "_obs_obj_max_len", None) == 14
            and model.nmocap == 1
            and model.nu == 2
            and type(self)._step_mujoco_simulation is _mujoco_env_class()._step_mujoco_simulation
        )
        if not plain:
            self._views = (data, None)
            return self._views
        assert self._pos_source is not None
        kind, name, offset = self._pos_source
        rows = {"body": data.xpos, "site": data.site_xpos, "geom": data.geom_xpos}[kind]
        quat = None if self._zero_quat else _quat_list_reader(self._quat_source, self)
        self._views = (
            data,
            model,
            _mujoco(),
            data.xpos,
            data.mocap_pos,
            data.mocap_quat,
            data.ctrl,
            self._id("body", "hand"),
            self._id("body", "rightclaw"),
            self._id("body", "leftclaw"),
            (rows, self._id(kind, name), offset),
            quat,
        )
        self._tcp_views = (
            data.site_xpos,
            self._id("site", "rightEndEffector"),
            self._id("site", "leftEndEffector"),
        )
        return self._views

    def _tcp_center_list(self) -> list[float]:
        # tcp_center, (right + left) / 2.0, as floats
        site_xpos, right, left = self._tcp_views  # type: ignore[misc]
        r0, r1, r2 = site_xpos[right].tolist()
        l0, l1, l2 = site_xpos[left].tolist()
        return [(r0 + l0) / 2.0, (r1 + l1) / 2.0, (r2 + l2) / 2.0]

    @staticmethod
    def _finite_bounds(space: Any) -> tuple[Any, list[tuple[int, float, float]]]:
        low, high = space.low.tolist(), space.high.tolist()
        finite = [
            (i, lo, hi)
            for i, (lo, hi) in enumerate(zip(low, high, strict=True))
            if not (lo == -math.inf and hi == math.inf)
        ]
        return space, finite

    def _step_arrays(self, action: Any) -> tuple[np.ndarray, Any, bool, bool, dict[str, Any]]:
        # SawyerXYZEnv.step on arrays, for actions other than 1-D float32/float64 arrays.
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


@functools.cache
def _mujoco() -> Any:
    import mujoco

    return mujoco


@functools.cache
def _mujoco_env_class() -> Any:
    from gymnasium.envs.mujoco.mujoco_env import MujocoEnv

    return MujocoEnv


def _quat_list_reader(source: tuple[str, str] | None, env: Any) -> Any:
    """A function of the env giving ``_get_quat_objects().tolist()``: from a view of the
    quaternion source's row, or by the task's own method where it has none."""
    if source is None:
        return lambda e: e._get_quat_objects().tolist()
    kind, name = source
    i = env._id(kind, name)
    if kind == "body":
        xquat = env.data.xquat
        return lambda e: xquat[i].tolist()
    xmat = getattr(env.data, kind + "_xmat")
    return lambda e: _scipy_quat_from_matrix(xmat[i]).tolist()


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


# --- Exact fast rewards ----------------------------------------------------------------------
# ``compute_reward`` + ``evaluate_state`` (reward_function_version "v2") of the drawer and window
# tasks on Python floats: each array element and 0-d value computed by the same IEEE operation in
# the same order, every norm's sum of squares as numpy's dot sums it (_squared_norms), the norm of
# a scalar as sqrt(x * x) (a one-element dot: 0.0 + x * x, fused or not), tolerance by _tolerance,
# hamacher_product by reward_utils itself; values keep the original's types. ``obs`` is the
# clipped observation as a list, ``pos`` the unclipped ``_get_pos_objects()``. Anything else
# (another reward version, arrays that are not float64 3-vectors) goes to ``evaluate_state``.


def _float64_vectors(*arrays: Any) -> bool:
    for a in arrays:
        if type(a) is not np.ndarray or a.dtype.char != "d" or a.shape != (3,):
            return False
    return True


def _info(
    success: float,
    near_object: float,
    grasp_success: float,
    grasp_reward: Any,
    in_place_reward: Any,
    obj_to_target: Any,
    unscaled_reward: Any,
) -> dict[str, Any]:
    """``evaluate_state``'s info dict, its keys in Meta-World's order."""
    return {
        "success": success,
        "near_object": near_object,
        "grasp_success": grasp_success,
        "grasp_reward": grasp_reward,
        "in_place_reward": in_place_reward,
        "obj_to_target": obj_to_target,
        "unscaled_reward": unscaled_reward,
    }


def _drawer_open_reward(
    env: Any, obs: list[float], pos: list[float], obs_array: np.ndarray, action: Any
) -> tuple[Any, dict[str, Any]]:
    target, init_tcp = env._target_pos, env.init_tcp
    if env.reward_function_version != "v2" or not _float64_vectors(target, init_tcp):
        return env.evaluate_state(obs_array, action)
    g0, g1, g2 = obs[0:3]  # gripper = obs[:3]
    h0, h1, h2 = obs[4:7]  # handle = obs[4:7]
    t0, t1, t2 = target.tolist()
    c0, c1, c2 = init_tcp.tolist()
    max_dist = env.maxDist
    p0, p1, p2 = t0 + 0.0, t1 + max_dist, t2 + 0.0  # target + np.array([0.0, maxDist, 0.0])
    sq = _squared_norms(
        (
            (h0 - t0, h1 - t1, h2 - t2),  # handle - target
            ((h0 - g0) * 3.0, (h1 - g1) * 3.0, (h2 - g2) * 1.0),  # (handle - gripper) * scale
            ((p0 - c0) * 3.0, (p1 - c1) * 3.0, (p2 - c2) * 1.0),  # (pos_init - init_tcp) * scale
            (h0 - g0, h1 - g1, h2 - g2),  # handle - gripper
        )
    )
    handle_error = math.sqrt(sq[0])
    reward_for_opening = _tolerance(handle_error, 0.02, max_dist, gaussian=False)
    reward_for_caging = _tolerance(math.sqrt(sq[1]), 0.01, math.sqrt(sq[2]), gaussian=False)
    reward = reward_for_caging + reward_for_opening
    reward *= 5.0
    return reward, _info(
        success=float(handle_error <= 0.03),
        near_object=float(math.sqrt(sq[3]) <= 0.03),
        grasp_success=float(obs[3] > 0),
        grasp_reward=reward_for_caging,
        in_place_reward=reward_for_opening,
        obj_to_target=handle_error,
        unscaled_reward=reward,
    )


def _drawer_close_reward(
    env: Any, obs: list[float], pos: list[float], obs_array: np.ndarray, action: Any
) -> tuple[Any, dict[str, Any]]:
    target, init_tcp, obj_init = env._target_pos, env.init_tcp, env.obj_init_pos
    if env.reward_function_version != "v2" or not _float64_vectors(target, init_tcp, obj_init):
        return env.evaluate_state(obs_array, action)
    hamacher_product = _fast_reward_utils().hamacher_product
    o0, o1, o2 = obs[4:7]  # obj = obs[4:7]
    t0, t1, t2 = target.tolist()
    c0, c1, c2 = init_tcp.tolist()
    i0, i1, i2 = obj_init.tolist()
    tcp0, tcp1, tcp2 = env._tcp_center_list()
    sq = _squared_norms(
        (
            (o0 - t0, o1 - t1, o2 - t2),  # obj - target
            (i0 - t0, i1 - t1, i2 - t2),  # obj_init_pos - target
            (o0 - tcp0, o1 - tcp1, o2 - tcp2),  # obj - tcp
            (i0 - c0, i1 - c1, i2 - c2),  # obj_init_pos - init_tcp
        )
    )
    radius = env.TARGET_RADIUS
    target_to_obj = math.sqrt(sq[0])  # a numpy float64 in the original (obj_to_target below)
    in_place = _tolerance(target_to_obj, radius, abs(math.sqrt(sq[1]) - radius), gaussian=False)
    tcp_to_obj = math.sqrt(sq[2])
    reach = _tolerance(tcp_to_obj, 0.005, abs(math.sqrt(sq[3]) - 0.005), gaussian=True)
    gripper_closed = min(max(0, action[-1]), 1)  # the original's expression and types
    reach = hamacher_product(reach, gripper_closed)
    reward = hamacher_product(reach, in_place)
    if target_to_obj <= radius + 0.015:
        reward = 1.0
    reward *= 10
    return reward, _info(
        success=float(target_to_obj <= radius + 0.015),
        near_object=float(tcp_to_obj <= 0.01),
        grasp_success=1.0,
        grasp_reward=reach,
        in_place_reward=in_place,
        obj_to_target=np.float64(target_to_obj),
        unscaled_reward=reward,
    )


def _window_reward(
    env: Any, obs: list[float], pos: list[float], obs_array: np.ndarray, action: Any, opens: bool
) -> tuple[Any, dict[str, Any]]:
    # window-open and window-close differ in the initial distance along x (from obj_init_pos,
    # from window_handle_pos_init) and the reach sigmoid (long_tail, gaussian).
    target, init_tcp = env._target_pos, env.init_tcp
    obj_init, handle_init = env.obj_init_pos, env.window_handle_pos_init
    if env.reward_function_version != "v2" or not _float64_vectors(
        target, init_tcp, obj_init, handle_init
    ):
        return env.evaluate_state(obs_array, action)
    o0, o1, o2 = pos  # obj = self._get_pos_objects()
    t0, t1, t2 = target.tolist()
    c0, c1, c2 = init_tcp.tolist()
    h0, h1, h2 = handle_init.tolist()
    tcp0, tcp1, tcp2 = env._tcp_center_list()
    sq = _squared_norms(
        (
            (o0 - tcp0, o1 - tcp1, o2 - tcp2),  # obj - tcp
            (h0 - c0, h1 - c1, h2 - c2),  # window_handle_pos_init - init_tcp
        )
    )
    radius = env.TARGET_RADIUS
    x = o0 - t0  # obj[0] - target[0], its norm sqrt(x * x)
    target_to_obj = math.sqrt(x * x)
    x = (obj_init.tolist()[0] if opens else h0) - t0
    target_to_obj_init = math.sqrt(x * x)
    in_place = _tolerance(target_to_obj, radius, abs(target_to_obj_init - radius), gaussian=False)
    tcp_to_obj = math.sqrt(sq[0])
    reach = _tolerance(tcp_to_obj, 0.02, abs(math.sqrt(sq[1]) - 0.02), gaussian=not opens)
    reward = 10 * _fast_reward_utils().hamacher_product(reach, in_place)
    return reward, _info(
        success=float(target_to_obj <= radius),
        near_object=float(tcp_to_obj <= 0.05),
        grasp_success=1.0,
        grasp_reward=reach,
        in_place_reward=in_place,
        obj_to_target=target_to_obj,
        unscaled_reward=reward,
    )


def _window_open_reward(
    env: Any, obs: list[float], pos: list[float], obs_array: np.ndarray, action: Any
) -> tuple[Any, dict[str, Any]]:
    return _window_reward(env, obs, pos, obs_array, action, opens=True)


def _window_close_reward(
    env: Any, obs: list[float], pos: list[float], obs_array: np.ndarray, action: Any
) -> tuple[Any, dict[str, Any]]:
    return _window_reward(env, obs, pos, obs_array, action, opens=False)


_FAST_REWARDS: dict[str, Any] = {
    "drawer-open-v3": _drawer_open_reward,
    "drawer-close-v3": _drawer_close_reward,
    "window-open-v3": _window_open_reward,
    "window-close-v3": _window_close_reward,
}


@functools.cache
def fast_env_class(task: str, env_cls: type) -> type:
    """``env_cls`` with ``_ExactFastPaths`` mixed in (one class per task), and its methods that
    call ``reward_utils`` (each task's reward code) replaced by copies whose global
    ``reward_utils`` has the fast exact ``tolerance``; in those copies the task's class name
    means the new class (door's ``compute_reward`` calls ``SawyerDoorEnvV3._reward_pos``)."""
    namespace: dict[str, Any] = {
        "_quat_source": _QUAT_SOURCES.get(task),
        "_pos_source": _POS_SOURCES.get(task),
        "_zero_quat": task in _ZERO_QUAT_TASKS,
        "_fast_reward": _FAST_REWARDS.get(task),
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
