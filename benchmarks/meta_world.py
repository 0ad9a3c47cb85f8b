"""`distrl bench metaworld`: Meta-World env-steps/s of distrl's ``MetaWorldMT10`` (its exact fast
paths) against Gymnasium's ``SyncVectorEnv`` over the same unmodified Meta-World envs, one
process, same random actions. The two are timed alternately, ``repeats`` times each, and the
ratio is the median of the per-repeat ratios (so a slow moment of the machine hits both).

``--pool-workers P`` adds a third side, timed in the same alternation: the same env with its
rows split over P subprocesses (``--env.vectorization async``, ``envs/episodic_pool.py``);
``pool_ratio`` is its per-repeat median ratio to the in-process ``MetaWorldMT10``."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from benchmarks import common

DEFAULT_TASKS = "push-v3,pick-place-v3,door-open-v3,drawer-open-v3,window-open-v3"


@dataclass(frozen=True)
class MetaWorldArgs:
    tasks: str = DEFAULT_TASKS
    """MT10 tasks to measure, comma-separated."""
    num_envs: int = 10
    """Envs of the task (SyncVectorEnv: goal variant i for env i; MetaWorldMT10 draws them)."""
    steps: int = 1000
    """Steps of all envs per timed run."""
    repeats: int = 5
    """Timed runs of each side, alternating; medians are reported."""
    threads: int = 1
    """Intra-op threads."""
    pool_workers: int = 0
    """Also time the env stepped by this many subprocesses (0: not)."""
    out: str | None = None
    """Results directory (default bench_out/metaworld)."""


def _sync_env(task: str, num_envs: int) -> Any:
    import gymnasium as gym

    from distrl.envs.meta_world import mt10_benchmark

    bench = mt10_benchmark(0)
    variants = [t for t in bench.train_tasks if t.env_name == task]
    cls = bench.train_classes[task]

    def factory(i: int) -> Any:
        def make() -> Any:
            env = cls()
            env.set_task(variants[i % len(variants)])
            return env

        return make

    return gym.vector.SyncVectorEnv([factory(i) for i in range(num_envs)])


def measure_task(a: MetaWorldArgs, task: str) -> dict:
    from distrl.envs.meta_world import MetaWorldMT10, make_mt10

    ours = MetaWorldMT10(task, a.num_envs)
    pool = None
    if a.pool_workers:
        pool = make_mt10(task, a.num_envs, vectorization="async", num_workers=a.pool_workers)
    sync = _sync_env(task, a.num_envs)
    sync.reset(seed=0)
    rng = np.random.default_rng(0)
    ours_sps, sync_sps, pool_sps = [], [], []

    def rate(step: Any, batch: Any) -> float:
        t0 = time.perf_counter()
        for act in batch:
            step(act)
        return a.num_envs * a.steps / (time.perf_counter() - t0)

    for _ in range(a.repeats):
        actions = rng.uniform(-1, 1, (a.steps, a.num_envs, 4)).astype(np.float32)
        batch = torch.from_numpy(actions)
        ours_sps.append(rate(ours.step, batch))
        if pool is not None:
            pool_sps.append(rate(pool.step, batch))
        sync_sps.append(rate(sync.step, actions))
    ours.close()
    sync.close()
    pooled = {}
    if pool is not None:
        pool.close()
        pool_ratios = [p / o for p, o in zip(pool_sps, ours_sps, strict=True)]
        pooled = {
            "pool_workers": a.pool_workers,
            "pool_sps": statistics.median(pool_sps),
            "pool_ratio": statistics.median(pool_ratios),
            "pool_ratio_min": min(pool_ratios),
            "pool_ratio_max": max(pool_ratios),
        }
    ratios = [o / s for o, s in zip(ours_sps, sync_sps, strict=True)]
    return {
        "task": task,
        "num_envs": a.num_envs,
        "steps": a.steps,
        "repeats": a.repeats,
        "threads": a.threads,
        "distrl_sps": statistics.median(ours_sps),
        "sync_sps": statistics.median(sync_sps),
        "ratio": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        **pooled,
    }


def metaworld(a: MetaWorldArgs) -> list[dict]:
    from distrl.envs.meta_world import MT10_TASKS
    from distrl.envs.registry import _require_metaworld

    _require_metaworld()
    tasks = [t.strip() for t in a.tasks.split(",") if t.strip()]
    unknown = [t for t in tasks if t not in MT10_TASKS]
    if unknown or not tasks:
        raise ValueError(f"unknown MT10 task(s) {unknown}; tasks: {', '.join(MT10_TASKS)}")
    if a.num_envs < 1 or a.steps < 1 or a.repeats < 1:
        raise ValueError(
            f"--num-envs, --steps and --repeats must be >= 1, got "
            f"{a.num_envs}, {a.steps}, {a.repeats}"
        )
    if not 0 <= a.pool_workers <= a.num_envs:
        raise ValueError(f"--pool-workers must be in 0..{a.num_envs}, got {a.pool_workers}")
    out = common.out_dir(a.out, "metaworld")
    m = common.header("Meta-World env-steps/s: MetaWorldMT10 vs Gymnasium SyncVectorEnv")
    torch.set_num_threads(a.threads)
    rows = []
    for task in tasks:
        row = measure_task(a, task)
        rows.append({**row, **{k: m[k] for k in ("cpu", "cores", "torch")}})
        common.console.print(f"{task}: {row['ratio']:.2f} x")
    pool_columns = [("pool", "pool_sps"), ("pool / distrl", "pool_ratio")]
    common.show(
        "env-steps/s per process (median of alternating runs)",
        rows,
        [
            ("task", "task"),
            ("distrl", "distrl_sps"),
            ("SyncVectorEnv", "sync_sps"),
            ("ratio", "ratio"),
            ("min", "ratio_min"),
            ("max", "ratio_max"),
            *(pool_columns if a.pool_workers else []),
        ],
    )
    common.write_csv(out / "metaworld.csv", rows)
    common.console.print(f"wrote {out / 'metaworld.csv'}")
    return rows
