"""Stable-Baselines3's DQN, SAC and TD3 as the peers of distrl's off-policy figures (run in its
own venv, as peers/sb3_ppo.py):

    python3 -m venv .venv-sb3
    .venv-sb3/bin/pip install -c constraints.txt stable-baselines3 "gymnasium[mujoco]" torch
    .venv-sb3/bin/python peers/sb3_offpolicy.py dqn CartPole-v1 --seed 0

Settings are rl-zoo3's entries (hyperparams/dqn.yml, sac.yml, td3.yml): DQN on CartPole-v1 (50k
steps, lr 2.3e-3, batch 64, buffer 100k, learning_starts 1000, target copied every 10 steps,
train_freq 256 with 128 gradient steps, epsilon to 0.04 over 16%, [256, 256]); SAC on Pendulum-v1
(20k steps, lr 1e-3, the rest SB3's defaults: buffer 1M, batch 256, learning_starts 100, one
gradient step per env step, [256, 256]); TD3 on Pendulum-v1 (20k steps, lr 1e-3, Gaussian action
noise 0.1, [400, 300]); on HalfCheetah-v5 rl-zoo3's MuJoCo entries (1M steps, 10k random steps
first; SAC: SB3's defaults otherwise, lr 3e-4; TD3: lr 1e-3, batch 256, one update per env step,
noise 0.1, [400, 300]). torch's default thread count (a user's default, as distrl's figures beside
it) unless --threads. Prints one JSON line: the training wall time (the clock starts when ``learn``
starts), env-steps/s, and the deterministic policy's mean return over 10 episodes after training
(``evaluate_policy``), as ``distrl play`` scores distrl's.
"""

from __future__ import annotations

import argparse
import json
import time

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import DQN, SAC, TD3
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.noise import NormalActionNoise

CLASSES = {"dqn": DQN, "sac": SAC, "td3": TD3}
_TD3_NET = dict(net_arch=[400, 300])
ZOO = {  # (algorithm, env): (env steps, keyword arguments)
    ("dqn", "CartPole-v1"): (
        50_000,
        dict(
            learning_rate=2.3e-3,
            batch_size=64,
            buffer_size=100_000,
            learning_starts=1000,
            gamma=0.99,
            target_update_interval=10,
            train_freq=256,
            gradient_steps=128,
            exploration_fraction=0.16,
            exploration_final_eps=0.04,
            policy_kwargs=dict(net_arch=[256, 256]),
        ),
    ),
    ("sac", "Pendulum-v1"): (20_000, dict(learning_rate=1e-3)),
    ("td3", "Pendulum-v1"): (20_000, dict(learning_rate=1e-3, policy_kwargs=_TD3_NET)),
    ("sac", "HalfCheetah-v5"): (1_000_000, dict(learning_starts=10_000)),
    ("td3", "HalfCheetah-v5"): (
        1_000_000,
        dict(learning_starts=10_000, learning_rate=1e-3, batch_size=256, policy_kwargs=_TD3_NET),
    ),
}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("algorithm", choices=sorted(CLASSES))
    p.add_argument("env", choices=sorted({env for _, env in ZOO}))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=None, help="default: rl-zoo3's")
    p.add_argument("--threads", type=int, default=None, help="default: torch's")
    args = p.parse_args()
    if (args.algorithm, args.env) not in ZOO:
        p.error(f"no rl-zoo3 entry here for {args.algorithm} on {args.env}")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    cls = CLASSES[args.algorithm]
    steps, kwargs = ZOO[args.algorithm, args.env]
    steps = args.steps or steps
    env = gym.make(args.env)
    if args.algorithm == "td3":
        n = env.action_space.shape[0]
        kwargs = {**kwargs, "action_noise": NormalActionNoise(np.zeros(n), 0.1 * np.ones(n))}
    model = cls("MlpPolicy", env, seed=args.seed, verbose=0, **kwargs)
    t0 = time.perf_counter()
    model.learn(total_timesteps=steps)
    wall = time.perf_counter() - t0
    mean, std = evaluate_policy(model, gym.make(args.env), n_eval_episodes=10, deterministic=True)
    print(
        json.dumps(
            {
                "peer": f"sb3-{args.algorithm}",
                "env": args.env,
                "seed": args.seed,
                "steps": steps,
                "wall_s": round(wall, 2),
                "sps": round(steps / wall, 1),
                "eval_return_mean": round(float(mean), 2),
                "eval_return_std": round(float(std), 2),
            }
        )
    )


if __name__ == "__main__":
    main()
