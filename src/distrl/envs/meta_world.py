"""Meta-World MT10 (Yu et al. 2019, "Meta-World: A Benchmark and Evaluation for Multi-Task and
Meta Reinforcement Learning") as an ``EpisodicVecEnv``: state observations, success from
``info["success"]``, and each task's 50 goal variants as its init-state list.

Needs the ``metaworld`` extra (``pip install -c constraints.txt -e '.[metaworld]'``: metaworld
3.1.1, which pins mujoco 3.3.0; headless, CPU). The simulator is per env, so rows are stepped in
a Python loop and observations are converted to one tensor per step; ``make_mt10`` with
``vectorization="async"`` splits the rows over a pool of subprocesses instead
(``envs/episodic_pool.py``: the same results, each worker stepping its slice).

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
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from distrl.envs.core import ActionSpace
from distrl.envs.episodic_pool import make_pooled
from distrl.envs.host_rows import HostRowsEnv
from distrl.envs.metaworld_3_1_patches import fast_env_class
from distrl.install import pip_install

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
INSTALL_HINT = f"{pip_install('metaworld')}  (metaworld==3.1.1 with mujoco==3.3.0)"
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


def _row_tasks(task: str | Sequence[str], num_envs: int) -> list[str]:
    row_tasks = [task] * num_envs if isinstance(task, str) else list(task)
    if len(row_tasks) != num_envs:
        raise ValueError(f"{len(row_tasks)} task names for {num_envs} envs; give one per env")
    unknown = sorted(set(row_tasks) - set(MT10_TASKS))
    if unknown:
        raise ValueError(f"unknown MT10 task {unknown[0]!r}; tasks: {', '.join(MT10_TASKS)}")
    return row_tasks


class MetaWorldMT10(HostRowsEnv):
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
        row_tasks = _row_tasks(task, num_envs)
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
            t: fast_env_class(t, bench.train_classes[t]) if fast_paths else bench.train_classes[t]
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
        self.obs_rows = np.zeros((num_envs, self.obs_dim), dtype=np.float32)
        if one_hot:
            ids = [STATE_DIM + MT10_TASKS.index(t) for t in row_tasks]
            self.obs_rows[np.arange(num_envs), ids] = 1
        self.start_rows(range(num_envs), [0] * num_envs)

    def start_rows(self, rows: Sequence[int] | np.ndarray, inits: Sequence[int]) -> None:
        for row, v in zip(rows, inits, strict=True):
            env = self.envs[row]
            env.set_task(self._variants[self.row_tasks[row]][int(v)])
            obs, _ = env.reset()
            self.obs_rows[row, :STATE_DIM] = obs
            self.elapsed[row] = 0

    def advance(self, actions: np.ndarray) -> tuple[np.ndarray, ...]:
        acts = np.clip(actions, -1.0, 1.0)
        dense_mode = self.reward_mode == "dense"
        rows, rewards, successes = [], [], []
        for env, act in zip(self.envs, acts, strict=True):
            obs, dense, _, _, info = env.step(act)
            rows.append(obs)
            succeeded = info["success"] > 0.5
            successes.append(succeeded)
            rewards.append(dense if dense_mode else float(succeeded))
        # One cast of all rows (float64 to float32, element by element as a row's would be).
        self.obs_rows[:, :STATE_DIM] = rows
        reward = np.array(rewards, dtype=np.float32)
        success = np.array(successes, dtype=bool)
        self.elapsed += 1
        truncated = self.elapsed >= self.max_episode_steps
        terminated = np.zeros_like(success) if dense_mode else success
        return reward, terminated, truncated, success

    def close(self) -> None:
        for env in self.envs:
            env.close()


def _rows(row_tasks: list[str], options: dict[str, Any], lo: int, hi: int) -> MetaWorldMT10:
    """Rows lo..hi-1 of a pooled env (built in its worker, on the CPU)."""
    return MetaWorldMT10(row_tasks[lo:hi], hi - lo, "cpu", **options)


def make_mt10(
    task: str | Sequence[str],
    num_envs: int,
    device: torch.device | str = "cpu",
    max_episode_steps: int | None = None,
    *,
    vectorization: str = "sync",
    num_workers: int = 0,
    start_method: str | None = None,
    **options: Any,
) -> HostRowsEnv:
    """``MetaWorldMT10(task, num_envs, device, max_episode_steps, **options)`` stepped in this
    process (``vectorization="sync"``), or with its rows split over ``num_workers`` subprocesses
    (``"async"``: ``envs.episodic_pool``, the same results; 0 workers: one per core of this rank,
    at most one per row), in this process after a warning if the pool cannot start."""
    serial = functools.partial(MetaWorldMT10, task, num_envs, device, max_episode_steps, **options)
    if vectorization == "sync":
        return serial()
    row_tasks = _row_tasks(task, num_envs)
    # Built here once (MT10's 500 resets): forked workers inherit it instead of each building it.
    mt10_benchmark(HELD_OUT_BENCHMARK_SEED if options.get("held_out") else
                   options.get("benchmark_seed", 0))  # fmt: skip
    make_rows = functools.partial(_rows, row_tasks, {"max_episode_steps": max_episode_steps,
                                                     **options})  # fmt: skip
    what = "MT10" if len(set(row_tasks)) > 1 else row_tasks[0]
    return make_pooled(make_rows, serial, num_envs, num_workers, device, what, start_method)
