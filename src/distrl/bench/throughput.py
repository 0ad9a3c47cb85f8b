"""`distrl bench throughput`: env-steps per second of the rollout alone and of whole training
iterations, each case in a fresh process (its own thread count and peak memory).

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
import time

import torch


def measure(
    case: str, task: str, num_envs: int, num_steps: int, iterations: int, threads: int
) -> dict:
    from distrl.config import AgentConfig, EnvConfig, validate
    from distrl.distributed import context
    from distrl.distributed.strategies import make_strategy
    from distrl.envs.registry import get_task, make_env
    from distrl.runner.on_policy import OnPolicyRunner

    base = get_task(task).default_config()
    cfg = dataclasses.replace(
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
        policy=dataclasses.replace(base.policy, actor_hidden=(64, 64), critic_hidden=(64, 64)),
        threads=threads,
        tensorboard=False,
        progress=False,
    )
    validate(cfg)
    ctx = context.init(cfg)
    env = make_env(cfg, ctx.device)
    runner = OnPolicyRunner(cfg, make_strategy(cfg, ctx), env)
    steps_per_it = num_envs * num_steps
    runner.rollout()  # warm-up (allocator, first-call overheads)
    if case == "e2e":
        runner.learn_step()
    times = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        runner.rollout()
        if case == "e2e":
            runner.learn_step()
        times.append(time.perf_counter() - t0)
    times.sort()
    med = times[len(times) // 2]
    return {
        "case": case,
        "task": task,
        "num_envs": num_envs,
        "num_steps": num_steps,
        "threads": threads,
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
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    print(json.dumps(measure(a.case, a.task, a.num_envs, a.num_steps, a.iterations, a.threads)))


if __name__ == "__main__":
    main()
