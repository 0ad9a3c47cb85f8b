"""Meta-World MT10 (Yu et al. 2019, "Meta-World: A Benchmark and Evaluation for Multi-Task and
Meta Reinforcement Learning") as an ``EpisodicVecEnv``: state observations, success from
``info["success"]``, and each task's 50 goal variants as its init-state list.

Needs the ``metaworld`` extra (``pip install -c constraints.txt -e '.[metaworld]'``: metaworld
3.1.1, which pins mujoco 3.3.0; headless, CPU). The simulator is per env, so rows are stepped in
a Python loop and observations are converted to one tensor per step.

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
from distrl.envs.episodic import EpisodicVecEnv
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
        tensor = torch.from_numpy(array.copy())
        return tensor if self.device.type == "cpu" else tensor.to(self.device)

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
        dense_mode = self.reward_mode == "dense"
        rows, rewards, successes = [], [], []
        for env, act in zip(self.envs, acts, strict=True):
            obs, dense, _, _, info = env.step(act)
            rows.append(obs)
            succeeded = info["success"] > 0.5
            successes.append(succeeded)
            rewards.append(dense if dense_mode else float(succeeded))
        # One cast of all rows (float64 to float32, element by element as a row's would be).
        self._obs[:, :STATE_DIM] = rows
        reward = np.array(rewards, dtype=np.float32)
        success = np.array(successes, dtype=bool)
        self.elapsed += 1
        truncated = self.elapsed >= self.max_episode_steps
        final_obs = self._tensor(self._obs)
        terminated = success if self.reward_mode == "success" else np.zeros_like(success)
        done = (terminated | truncated).nonzero()[0]
        if len(done):  # (drawing no variant leaves the generator as it is)
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
