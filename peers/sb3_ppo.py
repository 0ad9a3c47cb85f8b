"""Stable-Baselines3's PPO as the peer for `distrl bench solve` figures (run in its own venv).

    python3 -m venv .venv-sb3
    .venv-sb3/bin/pip install -c constraints.txt stable-baselines3 "gymnasium[mujoco]" torch
    .venv-sb3/bin/python peers/sb3_ppo.py HalfCheetah-v5 --steps 1000000 --seed 0

Settings: ``mujoco`` is CleanRL's MuJoCo PPO (which SB3's defaults equal: 1 env x 2048 steps,
10 epochs of minibatch 64, lr 3e-4 decayed linearly, observations and rewards normalized by
VecNormalize, [64, 64] tanh nets); ``zoo-cartpole`` is rl-zoo3's CartPole-v1 entry (8 envs x 32
steps, 20 epochs of 256, gamma 0.98, lambda 0.8, lr and clip decayed linearly from 1e-3 and 0.2);
``zoo-pendulum`` is rl-zoo3's Pendulum-v1 entry (4 envs x 1024 steps, gamma 0.9, 10 epochs of 64,
lr 1e-3, gSDE, normalized). One torch thread (as distrl's figures). Prints one JSON line: the
wall time to reach ``--target`` (mean return of the last 100 episodes, distrl's definition, checked
after every rollout) and the training env-steps/s; the clock starts when ``learn`` starts.
"""

from __future__ import annotations

import argparse
import json
import time

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecNormalize


def linear(start: float):
    return lambda progress: progress * start


SETTINGS = {
    "mujoco": dict(n_envs=1, normalize=True, ppo=dict()),
    "zoo-cartpole": dict(
        n_envs=8,
        normalize=False,
        ppo=dict(
            n_steps=32,
            batch_size=256,
            gae_lambda=0.8,
            gamma=0.98,
            n_epochs=20,
            ent_coef=0.0,
            learning_rate=linear(1e-3),
            clip_range=linear(0.2),
        ),
    ),
    "zoo-pendulum": dict(
        n_envs=4,
        normalize=True,
        ppo=dict(
            n_steps=1024,
            gae_lambda=0.95,
            gamma=0.9,
            n_epochs=10,
            ent_coef=0.0,
            learning_rate=1e-3,
            clip_range=0.2,
            use_sde=True,
            sde_sample_freq=4,
        ),
    ),
}


class TimeToTarget(BaseCallback):
    """Wall time and steps at the first rollout whose last-100-episode mean reaches ``target``;
    with ``stop``, training ends there."""

    def __init__(self, target: float | None, stop: bool = False):
        super().__init__()
        self.target, self.stop, self.start = target, stop, 0.0
        self.reached: tuple[float, int] | None = None
        self.last_return: float | None = None

    def _on_training_start(self) -> None:
        self.start = time.perf_counter()

    def _on_step(self) -> bool:
        return not (self.stop and self.reached)

    def _on_rollout_end(self) -> None:
        buf = self.model.ep_info_buffer
        if buf:
            self.last_return = float(np.mean([e["r"] for e in buf]))
            if self.reached is None and self.target is not None and self.last_return >= self.target:
                self.reached = (time.perf_counter() - self.start, self.num_timesteps)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("env_id")
    p.add_argument("--settings", choices=sorted(SETTINGS), default="mujoco")
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target", type=float, default=None)
    p.add_argument("--stop-at-target", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(1)
    s = SETTINGS[a.settings]
    env = make_vec_env(a.env_id, n_envs=s["n_envs"], seed=a.seed)
    if s["normalize"]:
        env = VecNormalize(env, gamma=s["ppo"].get("gamma", 0.99))
    model = PPO("MlpPolicy", env, seed=a.seed, device="cpu", verbose=0, **s["ppo"])
    cb = TimeToTarget(a.target, stop=a.stop_at_target)
    t0 = time.perf_counter()
    model.learn(total_timesteps=a.steps, callback=cb)
    wall = time.perf_counter() - t0
    print(
        json.dumps(
            {
                "peer": f"stable-baselines3 {__import__('stable_baselines3').__version__}",
                "env": a.env_id,
                "settings": a.settings,
                "seed": a.seed,
                "steps": model.num_timesteps,
                "wall_time_s": wall,
                "sps": model.num_timesteps / wall,
                "time_to_target_s": cb.reached[0] if cb.reached else None,
                "steps_to_target": cb.reached[1] if cb.reached else None,
                "final_return": cb.last_return,
                "gymnasium": gym.__version__,
                "torch": torch.__version__,
            }
        )
    )


if __name__ == "__main__":
    main()
