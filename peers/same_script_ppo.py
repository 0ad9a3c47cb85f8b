"""One Stable-Baselines3 script, run with SB3's classes or with distrl's: the peer of
``distrl bench sb3-api``. Only the import differs between the two runs.

    .venv-sb3/bin/python peers/same_script_ppo.py sb3 --seed 0     # SB3's venv
    .venv/bin/python peers/same_script_ppo.py distrl --seed 0      # distrl's
    .venv/bin/python peers/same_script_ppo.py distrl --algo dqn    # DQN instead of PPO

The script is SB3's own quickstart on CartPole-v1 with its defaults: ``PPO("MlpPolicy",
"CartPole-v1")`` (one env, 2048 steps a rollout, 10 epochs of minibatch 64, lr 3e-4 constant,
64 x 64 tanh) or ``DQN("MlpPolicy", "CartPole-v1")`` (SB3's DQN defaults), ``learn`` for
``--steps``, then the deterministic policy's mean return over 10 episodes of a Gymnasium
CartPole-v1 seeded 0 to 9, each action from ``model.predict``. Prints one JSON line: the wall
time of ``learn`` (model construction excluded), env-steps/s and the evaluation. Each library
keeps its own default thread count, as a user gets it.
"""

from __future__ import annotations

import argparse
import json
import time

import gymnasium as gym
import numpy as np


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("lib", choices=["sb3", "distrl"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--algo", choices=["ppo", "dqn"], default="ppo")
    args = p.parse_args()
    if args.lib == "sb3":
        import stable_baselines3 as lib
    else:
        import distrl as lib  # type: ignore[no-redef]

    Model = lib.PPO if args.algo == "ppo" else lib.DQN
    model = Model("MlpPolicy", "CartPole-v1", seed=args.seed, verbose=0)
    t0 = time.perf_counter()
    model.learn(total_timesteps=args.steps)
    wall = time.perf_counter() - t0
    env, returns = gym.make("CartPole-v1"), []
    for episode in range(10):
        obs, _ = env.reset(seed=episode)
        done, total = False, 0.0
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(int(action))
            total, done = total + float(reward), terminated or truncated
        returns.append(total)
    print(json.dumps({
        "lib": args.lib, "algo": args.algo, "seed": args.seed, "steps": args.steps,
        "wall_s": round(wall, 2),
        "sps": round(args.steps / wall, 1), "eval_return_mean": float(np.mean(returns)),
        "eval_return_std": float(np.std(returns)),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
