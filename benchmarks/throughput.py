"""`distrl bench throughput`: env-steps per second of the rollout alone and of whole training
iterations, each case in a fresh process (its own thread count and peak memory): the command
(``throughput``) starts ``python -m benchmarks.throughput`` (``main``) once per case and repeat.

Cases:
  rollout  policy act + env step + storage, the runner's own ``rollout()``, no learning
  e2e      whole iterations (rollout + GAE + PPO update), rsl_rl's CartPole configuration by
           default: 1024 envs, 32 steps, 5 epochs x 4 minibatches, [64, 64] MLPs
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import statistics
import time
from dataclasses import dataclass

import torch

from benchmarks import common


@dataclass(frozen=True)
class ThroughputArgs:
    task: str = "cartpole"
    """Task to measure."""
    rollout_envs: int = 4096
    """Envs for the rollout-only case."""
    e2e_envs: int = 1024
    """Envs for the end-to-end case (rsl_rl's CartPole setting)."""
    num_steps: int = 32
    """Steps per env per iteration."""
    iterations: int = 10
    """Timed iterations per run (after one warm-up)."""
    repeats: int = 3
    """Fresh processes per case; the median is reported."""
    threads: int = 1
    """Intra-op threads."""
    device: str = "auto"
    """Torch device (auto: the GPU when there is one, as `distrl train` picks)."""
    out: str | None = None
    """Results directory (default bench_out/throughput)."""


COLUMNS = [
    "case",
    "task",
    "num_envs",
    "num_steps",
    "threads",
    "device",
    "sps_median",
    "sps_runs",
    "peak_rss_mb",
]


def throughput(a: ThroughputArgs) -> list[dict]:
    m = common.header("distrl bench throughput")
    out = common.out_dir(a.out, "throughput")
    cases = (("rollout", a.rollout_envs), ("e2e", a.e2e_envs), ("e2e", a.rollout_envs))
    rows = [measure_case(a, case, envs, m) for case, envs in cases]
    common.write_csv(out / "throughput.csv", rows)
    common.print_table("throughput (env-steps/s, median of fresh processes)", rows, COLUMNS)
    common.console.print(f"wrote {out / 'throughput.csv'}")
    return rows


def measure_case(a: ThroughputArgs, case: str, envs: int, m: dict) -> dict:
    """``a.repeats`` fresh processes of one case: the median of their medians, their spread."""
    args = ["--case", case, "--task", a.task, "--num-envs", str(envs)]
    args += ["--num-steps", str(a.num_steps), "--iterations", str(a.iterations)]
    args += ["--threads", str(a.threads), "--device", a.device]
    runs = [common.run_json("benchmarks.throughput", args) for _ in range(a.repeats)]
    row = dict(runs[0])
    row["sps_median"] = statistics.median(r["sps_median"] for r in runs)
    row["sps_runs"] = " ".join(f"{r['sps_median']:.0f}" for r in runs)
    row["peak_rss_mb"] = max(r["peak_rss_mb"] for r in runs)
    return row | {"cpu": m["cpu"], "cores": m["cores"], "torch": m["torch"]}


def measure(
    case: str,
    task: str,
    num_envs: int,
    num_steps: int,
    iterations: int,
    threads: int,
    device: str = "auto",
    own_config: bool = False,
    agent: dict | None = None,
) -> dict:
    """``own_config``: the task's default config (its network, PPO settings) with only
    ``num_envs``, ``num_steps`` and ``agent`` overrides, instead of rsl_rl's CartPole setup;
    the row then holds the median time breakdown and the first (warm-up) iteration's time,
    which includes any compilation (``--agent.compile``)."""
    from benchmarks.roofline import device_sync
    from distrl.config import AgentConfig, EnvConfig, validate
    from distrl.distributed import context
    from distrl.distributed.strategies import make_strategy
    from distrl.envs.registry import get_task, make_env
    from distrl.runner.on_policy import OnPolicyRunner

    base = get_task(task).default_config()
    own = dataclasses.replace(
        base,
        env=EnvConfig(num_envs=num_envs),
        agent=dataclasses.replace(
            base.agent,
            num_steps=num_steps,
            max_iterations=iterations + 1,
            save_interval=10**9,
            **(agent or {}),
        ),
        threads=threads,
        device=device,
        tensorboard=False,
        progress=False,
    )
    cfg = (
        own
        if own_config
        else dataclasses.replace(
            base,
            task=task,
            env=EnvConfig(num_envs=num_envs),
            agent=dataclasses.replace(
                base.agent if case == "rollout" else AgentConfig(),
                num_steps=num_steps,
                num_epochs=5,
                num_minibatches=4,
                max_iterations=iterations,
                save_interval=10**9,
            ),
            policy=dataclasses.replace(
                base.policy,
                actor_hidden=(64, 64),
                critic_hidden=(64, 64),
                # rsl_rl's setup scales no rewards (cartpole's own defaults do, since 2026-11-25)
                reward_normalization=base.policy.reward_normalization and case == "rollout",
            ),
            threads=threads,
            device=device,
            tensorboard=False,
            progress=False,
        )
    )
    validate(cfg)
    ctx = context.init(cfg)
    env = make_env(cfg, ctx.device)
    runner = OnPolicyRunner(cfg, make_strategy(cfg, ctx), env)
    steps_per_it = num_envs * num_steps
    # e2e: one whole training iteration, exactly as `distrl train` runs it (Runner.iterate:
    # rollout, checks, update, record; logging goes to the null telemetry)
    step = runner.iterate if case == "e2e" else runner.rollout
    sync = device_sync(ctx.device)  # a GPU's queued work lands in the iteration that queued it
    sync()
    t0 = time.perf_counter()
    step()  # warm-up (allocator, first-call overheads, compilation)
    sync()
    first = time.perf_counter() - t0
    times, records = [], []
    for _ in range(iterations):
        sync()
        t0 = time.perf_counter()
        out = step()
        sync()
        times.append(time.perf_counter() - t0)
        records.append(out or {})
    breakdown = {
        k: statistics.median(r[k] for r in records)
        for k in ("time/rollout", "time/learn", "time/comm")
        if records and all(isinstance(r.get(k), float) for r in records)
    }
    times.sort()
    med = times[len(times) // 2]
    return {
        "config": "task" if own_config else "rsl_rl",
        "network": cfg.policy.network,
        "recurrent": cfg.policy.recurrent,
        "agent": agent or {},
        "first_iteration_s": first,
        **breakdown,
        "case": case,
        "task": task,
        "num_envs": num_envs,
        "num_steps": num_steps,
        "threads": threads,
        "device": str(ctx.device),
        "iterations": iterations,
        "sps_median": steps_per_it / med,
        "sps_best": steps_per_it / times[0],
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--case", choices=["rollout", "e2e"], required=True)
    p.add_argument("--task", default="cartpole")
    p.add_argument("--num-envs", type=int, default=4096)
    p.add_argument("--num-steps", type=int, default=32)
    p.add_argument("--iterations", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="auto")
    p.add_argument("--own-config", action="store_true", help="the task's defaults, not rsl_rl's")
    p.add_argument("--agent", default="{}", help="AgentConfig overrides as JSON (--own-config)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    r = measure(
        a.case,
        a.task,
        a.num_envs,
        a.num_steps,
        a.iterations,
        a.threads,
        a.device,
        a.own_config,
        json.loads(a.agent),
    )
    print(json.dumps(r))


if __name__ == "__main__":
    main()
