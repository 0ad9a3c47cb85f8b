"""Demonstrations for post-training as RIPT does it (Tan et al. 2025): a policy first imitates a
few demonstrations per task, then multi-task RLOO with a binary success reward lifts it. This
module makes and reads the demonstrations; ``distrl pretrain`` (``distrl.pretrain``) clones them.

    distrl demos reach10 --per-task 5 --out demos/reach10-5.pt
    distrl demos metaworld-mt10 --per-task 5 --out demos/mt10-5.pt     # needs the metaworld extra
    distrl demos metaworld-mt10 --per-task 5 --noise 0.3 --out demos/mt10-5-n.pt

Where demonstrations come from:
  reach10          ``reach_expert``: a scripted controller on Reach10's observation (a PD law
                   toward the goal that cancels wind and damping, plus a sideways push around an
                   obstacle in the way); it succeeds from every shipped init state (tested)
  metaworld-mt10   Meta-World's scripted v3 expert of each task (``metaworld.policies``,
                   ``ENV_POLICY_MAP``), which reads the 39 state values (the one-hot task id that
                   distrl appends is cut off)

Demo episode i of a task starts from the suite's init state ``first_init + i`` (the shipped list
of reach10, the goal variants of MT10(seed=0)).

The file (``torch.save``; read back with ``weights_only=True``): a dict

    {"format": "distrl-demos", "version": 1, "suite": name, "tasks": [names],
     "meta": {per_task, first_init, max_episode_steps, obs_dim, action_dim, source, ...},
     "data": {task: {"obs": [E, T, D] float32, "actions": [E, T, A] float32,
                     "lengths": [E] int64, "success": [E] bool, "init_indices": [E] int64}}}

Steps t >= lengths[e] are zero padding. Actions are what the expert chose, clipped to the
action bounds.

``--noise S`` records them with noise injection (DART, Laskey et al. 2017, "DART: Noise
Injection for Robust Imitation Learning"): the env executes the expert's action plus N(0, S^2)
per dimension (clipped to the bounds) while the file keeps the expert's own action at every
state it visited. A clone of noise-free demonstrations only ever saw the expert's path, so the
first deviation puts it where it has no data and the errors compound; with noise the file shows
the expert correcting deviations of about that size. Each demonstration is still one expert
episode from one init state. Where the noise made the expert fail, that init state is tried
again with fresh draws (up to ``NOISE_RETRIES`` times); an episode that still fails is kept
(``success`` False), and cloning and the demonstrations term leave it out.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
import tyro

from distrl.envs.episodic import EpisodicSuite, EpisodicVecEnv
from distrl.storage.episodes import collect_episodes

FORMAT, VERSION = "distrl-demos", 1


@dataclass(frozen=True)
class DemosArgs:
    suite: tyro.conf.Positional[str]
    """reach10 or metaworld-mt10 (needs the metaworld extra)."""
    per_task: int = 5
    """Expert episodes per task."""
    out: str | None = None
    """File to write (default demos/<suite>-<per-task>.pt)."""
    tasks: tuple[str, ...] = ()
    """Only these tasks of the suite (default: all)."""
    first_init: int = 0
    """Episode i of a task starts from init state first_init + i."""
    seed: int = 0
    """Env seed (what the init states leave random), and the noise's seed."""
    noise: float = 0.0
    """Std of Gaussian noise added to each action the env executes (the file keeps the
    expert's own actions: DART noise injection, see the module docstring); 0: none."""


SUITES = ("reach10", "metaworld-mt10")
NOISE_RETRIES = 10  # with --noise: more attempts from an init state where the expert failed

Expert = Callable[[torch.Tensor], torch.Tensor]
"""obs [N, obs_dim] -> actions [N, action_dim] in the action bounds."""


# ---- experts ---------------------------------------------------------------------------------
def reach_expert(obs: torch.Tensor) -> torch.Tensor:
    """Reach10's scripted controller, from the observation alone (layout in ``envs.reach``:
    [x, y, vx, vy, gx - x, gy - y, ox - x, oy - y, r, mass, damping, wind_x, wind_y]).

    Wanted acceleration a = kp e - kd v toward the goal (e = goal - p), plus a push sideways
    around an obstacle that is near and ahead (perpendicular to the obstacle's direction, on the
    goal's side); force u = (mass a + damping v - wind) / F, clipped to [-1, 1]."""
    from distrl.envs.reach import FORCE

    vel, to_goal, to_obs = obs[:, 2:4], obs[:, 4:6], obs[:, 6:8]
    radius, mass, damping, wind = obs[:, 8:9], obs[:, 9:10], obs[:, 10:11], obs[:, 11:13]
    kp, kd = 6.0, 4.0
    accel = kp * to_goal - kd * vel
    dist_o = to_obs.norm(dim=1, keepdim=True).clamp_min(1e-6)
    toward_o = to_obs / dist_o
    goal_dist = to_goal.norm(dim=1, keepdim=True).clamp_min(1e-6)
    ahead = (toward_o * to_goal / goal_dist).sum(1, keepdim=True)  # cos of goal vs obstacle
    perp = torch.stack((-toward_o[:, 1], toward_o[:, 0]), 1)
    side = torch.where((perp * to_goal).sum(1, keepdim=True) >= 0, 1.0, -1.0)
    # Active when the obstacle is ahead, nearer than the goal and within 0.35 of its rim.
    near = (radius > 0) & (ahead > 0.0) & (dist_o < goal_dist) & (dist_o < radius + 0.35)
    accel = accel + near.to(obs.dtype) * 6.0 * side * perp
    u = (mass * accel + damping * vel - wind) / FORCE
    return u.clamp(-1.0, 1.0)


def metaworld_expert(task: str) -> Expert:
    """Meta-World's scripted v3 policy of ``task`` on the first 39 values of each row."""
    from distrl.envs.meta_world import STATE_DIM, _metaworld

    _metaworld()  # the install hint when the package is missing
    from metaworld.policies import ENV_POLICY_MAP

    scripted = cast(Any, ENV_POLICY_MAP)[task]()  # typed as the abstract base class

    def act(obs: torch.Tensor) -> torch.Tensor:
        state = obs[:, :STATE_DIM].detach().cpu().double().numpy()
        actions = np.stack([scripted.get_action(row) for row in state]).astype(np.float32)
        return torch.from_numpy(actions).clamp(-1.0, 1.0).to(obs.device)

    return act


def expert_for(suite: str, task: str) -> Expert:
    if suite == "reach10":
        return reach_expert
    if suite == "metaworld-mt10":
        return metaworld_expert(task)
    raise ValueError(f"no scripted expert for {suite!r}; demonstrations exist for {SUITES}")


# ---- collection ------------------------------------------------------------------------------
class PerturbedActions(EpisodicVecEnv):
    """``env`` executing every action plus N(0, ``sigma``^2) noise per dimension, clipped to its
    bounds (drawn from ``generator``, on the CPU); everything else is ``env``'s."""

    def __init__(self, env: EpisodicVecEnv, sigma: float, generator: torch.Generator) -> None:
        if env.action_space.kind != "continuous":
            raise ValueError("--noise needs continuous actions")
        self.env, self.sigma, self.generator = env, sigma, generator
        self.num_envs, self.obs_dim, self.device = env.num_envs, env.obs_dim, env.device
        self.action_space, self.max_episode_steps = env.action_space, env.max_episode_steps
        self.num_init_states = env.num_init_states
        self.low = torch.tensor(env.action_space.low, device=env.device)
        self.high = torch.tensor(env.action_space.high, device=env.device)

    def reset(self, seed: int | None = None) -> torch.Tensor:
        return self.env.reset(seed)

    def reset_rows(self, mask: torch.Tensor, init_indices: torch.Tensor) -> torch.Tensor:
        return self.env.reset_rows(mask, init_indices)

    def step(
        self, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        noise = torch.randn(actions.shape, generator=self.generator).to(actions.device)
        executed = torch.maximum(torch.minimum(actions + self.sigma * noise, self.high), self.low)
        return self.env.step(executed)

    def close(self) -> None:
        self.env.close()


def collect_task_demos(
    env: EpisodicVecEnv,
    expert: Expert,
    per_task: int,
    first_init: int = 0,
    seed: int = 0,
    noise: float = 0.0,
) -> dict[str, torch.Tensor]:
    """``per_task`` expert episodes in ``env``, episode i from init state ``first_init + i``;
    with ``noise`` > 0 the env executes the expert's actions perturbed (``PerturbedActions``)
    and the expert's own are recorded."""
    if not first_init >= 0 or first_init + per_task > env.num_init_states:
        raise ValueError(
            f"demos from init states {first_init}..{first_init + per_task - 1}: the task has "
            f"{env.num_init_states} (0..{env.num_init_states - 1})"
        )

    def policy(obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return expert(obs), torch.zeros(obs.shape[0], device=obs.device)

    def collect(init: torch.Tensor) -> dict[str, torch.Tensor]:
        batch = collect_episodes(env, policy, init, 1, seed)
        return {
            "obs": batch.obs.float().cpu(),
            "actions": batch.actions.float().cpu(),
            "lengths": batch.lengths.cpu(),
            "success": batch.success.cpu(),
            "init_indices": batch.init_indices.cpu(),
        }

    if noise > 0:
        env = PerturbedActions(env, noise, torch.Generator().manual_seed(seed))
    data = collect(torch.arange(first_init, first_init + per_task))
    if noise > 0:  # the noise can make the expert fail: retry those starts with fresh draws
        for _ in range(NOISE_RETRIES):
            failed = (~data["success"]).nonzero().flatten()
            if failed.numel() == 0:
                break
            retry = collect(data["init_indices"][failed])
            for key, value in retry.items():
                data[key][failed] = value
    return data


def suite_of(name: str) -> EpisodicSuite:
    from distrl.envs.registry import get_task

    suite = get_task(name).suite
    if suite is None or name not in SUITES:
        raise ValueError(f"{name!r} is not an episodic suite with an expert; use one of {SUITES}")
    return suite


def make_demos(
    suite_name: str,
    per_task: int,
    tasks: tuple[str, ...] = (),
    first_init: int = 0,
    num_envs: int | None = None,
    max_episode_steps: int | None = None,
    seed: int = 0,
    noise: float = 0.0,
) -> dict[str, Any]:
    """The demonstrations file's dict (module docstring) for ``suite_name``."""
    if per_task < 1:
        raise ValueError(f"--per-task must be at least 1, got {per_task}")
    if not 0.0 <= noise <= 2.0:
        raise ValueError(
            f"--noise {noise}: give the std of the action noise in [0, 2] (actions lie in "
            f"[-1, 1]; 0.3 is a good start, 0 records the expert's own path)"
        )
    suite = suite_of(suite_name)
    names = suite.select(tasks, "--tasks")
    data: dict[str, dict[str, torch.Tensor]] = {}
    t0 = time.perf_counter()
    obs_dim = action_dim = steps = 0
    for name in names:
        env = suite.make_task_env(
            name, num_envs or per_task, torch.device("cpu"), max_episode_steps
        )
        try:
            data[name] = collect_task_demos(
                env, expert_for(suite_name, name), per_task, first_init, seed, noise
            )
            obs_dim, action_dim = env.obs_dim, env.action_space.dim
            steps = env.max_episode_steps
        finally:
            env.close()
    return {
        "format": FORMAT,
        "version": VERSION,
        "suite": suite_name,
        "tasks": list(names),
        "meta": {
            "per_task": per_task,
            "first_init": first_init,
            "max_episode_steps": steps,
            "obs_dim": obs_dim,
            "action_dim": action_dim,
            "seed": seed,
            "noise": noise,
            "source": "scripted reach controller (distrl.demos.reach_expert)"
            if suite_name == "reach10"
            else "metaworld.policies.ENV_POLICY_MAP (scripted v3 experts)",
            "seconds": round(time.perf_counter() - t0, 3),
        },
        "data": data,
    }


def save_demos(demos: dict[str, Any], path: str | Path) -> Path:
    """Write ``demos`` to ``path`` atomically: a temporary beside it (flushed, fsynced), then
    renamed over it, so a reader sees the old file or the new one, never half of one."""
    import io
    import os
    import secrets

    p = Path(path)
    buf = io.BytesIO()
    torch.save(demos, buf)
    tmp = p.with_name(f".tmp-{p.name}.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(buf.getbuffer())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise OSError(e.errno, f"could not write demonstrations file {p}: {e.strerror or e}") from e
    return p


_EPISODE_KEYS = ("obs", "actions", "lengths", "success", "init_indices")


def load_demos(path: str | Path, check_suite: bool = True) -> dict[str, Any]:
    """A demonstrations file, checked: readable, format, version, the keys of the module
    docstring, every task's tensors and shapes, and (``check_suite``) the tasks and the
    observation and action sizes against the suite's own. Every problem is a ValueError naming
    the file."""
    from distrl import checkpoint as ck
    from distrl.envs.registry import check_task_from_file

    p = Path(path).expanduser()
    where = f"demonstrations file {path}"
    if not p.is_file():
        raise ValueError(f"{where}: no such file; write one with `distrl demos`")
    unsafe = ck.unsafe_torch("demonstrations file")
    if unsafe is not None:
        raise ValueError(f"{where}: {unsafe}")
    try:
        demos = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as e:  # UnpicklingError, RuntimeError (truncated archive), EOFError, ...
        raise ValueError(
            f"{where}: not a readable demonstrations file ({type(e).__name__}: "
            f"{str(e).splitlines()[0] if str(e) else 'no detail'}); it is truncated, damaged or "
            f"not written by `distrl demos`: record it again with distrl demos SUITE --out FILE"
        ) from None
    if not isinstance(demos, dict) or demos.get("format") != FORMAT:
        raise ValueError(f"{where}: not a distrl demonstrations file")
    if demos.get("version") != VERSION:
        raise ValueError(f"{where}: version {demos.get('version')}, expected {VERSION}")
    missing = [k for k in ("suite", "tasks", "meta", "data") if k not in demos]
    if missing:
        raise ValueError(f"{where}: lacks {', '.join(missing)} (damaged or hand-made?)")
    if not isinstance(demos["suite"], str):
        raise ValueError(f"{where}: 'suite' should be a suite's name, e.g. reach10")
    # a name read from a file imports no module: a gym:<module>:<Id> is refused before any
    # lookup of it (check_suite's get_task, a caller's) could import that module
    check_task_from_file(demos["suite"], where)
    tasks, data = demos["tasks"], demos["data"]
    if not isinstance(tasks, list) or not tasks or not all(isinstance(t, str) for t in tasks):
        raise ValueError(f"{where}: 'tasks' should be a non-empty list of task names")
    if not isinstance(data, dict) or not isinstance(demos["meta"], dict):
        raise ValueError(f"{where}: 'data' and 'meta' should be dicts")
    dims: set[tuple[int, int]] = set()
    for name in tasks:
        d = data.get(name)
        if not isinstance(d, dict):
            raise ValueError(f"{where}: task {name} is listed but has no data")
        absent = [k for k in _EPISODE_KEYS if not isinstance(d.get(k), torch.Tensor)]
        if absent:
            raise ValueError(f"{where}: task {name}: lacks the tensors {', '.join(absent)}")
        obs, actions = d["obs"], d["actions"]
        E = d["lengths"].shape[0] if d["lengths"].dim() == 1 else -1
        shapes = {k: tuple(d[k].shape) for k in _EPISODE_KEYS}
        if (
            E < 1
            or obs.dim() != 3
            or actions.dim() != 3
            or obs.shape[:2] != actions.shape[:2]
            or any(tuple(d[k].shape[:1]) != (E,) for k in _EPISODE_KEYS)
            or any(d[k].dim() != 1 for k in ("lengths", "success", "init_indices"))
        ):
            raise ValueError(
                f"{where}: task {name}: shapes {shapes} do not fit obs [E, T, D], actions "
                f"[E, T, A] and lengths, success, init_indices [E]"
            )
        T = obs.shape[1]
        if bool((d["lengths"] < 1).any()) or bool((d["lengths"] > T).any()):
            raise ValueError(f"{where}: task {name}: episode lengths outside 1..{T}")
        dims.add((int(obs.shape[2]), int(actions.shape[2])))
    if len(dims) != 1:
        raise ValueError(f"{where}: tasks disagree on the observation/action sizes: {dims}")
    if check_suite:
        _check_against_suite(demos, where, dims.pop())
    return demos


def _check_against_suite(demos: dict[str, Any], where: str, dims: tuple[int, int]) -> None:
    """The file's tasks belong to its suite, and its sizes are the suite's observation and
    action sizes (one env of its first task is built to read them)."""
    suite = suite_of(demos["suite"])
    unknown = [t for t in demos["tasks"] if t not in suite.task_names]
    if unknown:
        raise ValueError(
            f"{where}: tasks {', '.join(unknown)} are not in the {demos['suite']} suite (its "
            f"tasks: {', '.join(suite.task_names)})"
        )
    env = suite.make_task_env(demos["tasks"][0], 1, torch.device("cpu"), None)
    try:
        expected = (int(env.obs_dim), int(env.action_space.dim))
    finally:
        env.close()
    if dims != expected:
        raise ValueError(
            f"{where}: observations of size {dims[0]} and actions of size {dims[1]}, but "
            f"{demos['suite']} has {expected[0]} and {expected[1]}; record the demonstrations "
            f"again with this distrl: distrl demos {demos['suite']} --out FILE"
        )


def demo_steps(
    demos: dict[str, Any], tasks: tuple[str, ...] | None = None, successful_only: bool = True
) -> tuple[torch.Tensor, torch.Tensor, dict[str, int]]:
    """Every real step of the demos of ``tasks`` (all when None) as (obs [S, D], actions
    [S, A]), optionally only from successful episodes; and the episodes used per task."""
    obs, actions, used = [], [], {}
    for name in tasks if tasks is not None else demos["tasks"]:
        d = demos["data"][name]
        keep = d["success"] if successful_only else torch.ones_like(d["success"])
        T = d["obs"].shape[1]
        mask = (torch.arange(T) < d["lengths"][:, None]) & keep[:, None]
        obs.append(d["obs"][mask])
        actions.append(d["actions"][mask])
        used[name] = int(keep.sum())
    return torch.cat(obs), torch.cat(actions), used


def summary(demos: dict[str, Any]) -> str:
    noise = demos["meta"].get("noise", 0.0)  # (files written before --noise have none)
    how = f", executed with N(0, {noise}^2) action noise (expert's actions recorded)"
    lines = [f"{demos['suite']}: {demos['meta']['per_task']} demos per task{how if noise else ''}"]
    for name in demos["tasks"]:
        d = demos["data"][name]
        ok, n = int(d["success"].sum()), d["success"].numel()
        lines.append(
            f"  {name:28s} success {ok}/{n}, mean length {float(d['lengths'].float().mean()):.1f}"
        )
    return "\n".join(lines)


def demos_main(a: DemosArgs) -> Path:
    """``distrl demos``: make, save and summarize; returns the file written."""
    demos = make_demos(a.suite, a.per_task, a.tasks, a.first_init, seed=a.seed, noise=a.noise)
    path = save_demos(demos, a.out or f"demos/{a.suite}-{a.per_task}.pt")
    print(summary(demos))
    print(f"written {path} ({demos['meta']['seconds']:.1f} s)")
    return path
