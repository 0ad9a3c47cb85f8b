"""rsl_rl's PPO as the peer for distrl's end-to-end throughput (run in its own venv).

    python3 -m venv .venv-peers
    .venv-peers/bin/pip install -c constraints.txt rsl-rl-lib==5.5.1 torch
    .venv-peers/bin/pip install -c constraints.txt --no-deps -e .    # for distrl's CartPole
    .venv-peers/bin/python peers/rsl_rl_ppo.py --iterations 20

Both learners step the same env, distrl's batched torch CartPole (held step for step against
Gymnasium's CartPole-v1), so the figures differ only by the learner. rsl_rl has Gaussian actions
only: its 1-D action a pushes right when a > 0. rsl_rl's CartPole setup: 1024 envs x 32 steps,
5 epochs x 4 minibatches, [64, 64] ELU actor and critic (rsl_rl's defaults otherwise: adaptive
LR, entropy 0.01), no logger, one torch thread. Prints one JSON line: env-steps/s over the timed
iterations (after ``--warmup`` untimed ones), the median of per-iteration rates, and the mean.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import statistics
import time

import torch
from rsl_rl.env import VecEnv
from rsl_rl.runners import OnPolicyRunner
from tensordict import TensorDict

from distrl.envs.cartpole import CartPole


class CartPoleForRslRl(VecEnv):
    """distrl's CartPole behind rsl_rl's VecEnv interface."""

    def __init__(self, num_envs: int, seed: int, device: str = "cpu"):
        self.env = CartPole(num_envs, device=device)
        self.num_envs, self.num_actions, self.device, self.cfg = num_envs, 1, device, {}
        self.max_episode_length = self.env.max_episode_steps
        self.obs = self.env.reset(seed=seed)
        self.episode_length_buf = torch.zeros(num_envs, dtype=torch.long, device=device)

    def get_observations(self) -> TensorDict:
        return TensorDict({"policy": self.obs}, batch_size=[self.num_envs])

    def step(self, actions: torch.Tensor):
        self.obs, rew, term, trunc, _ = self.env.step((actions[:, 0] > 0).long())
        done = term | trunc
        self.episode_length_buf = (self.episode_length_buf + 1) * (~done)
        extras = {"time_outs": trunc}
        return self.get_observations(), rew, done, extras


def train_cfg(steps: int, epochs: int, minibatches: int) -> dict:
    mlp = {"class_name": "MLPModel", "hidden_dims": [64, 64], "activation": "elu"}
    return {
        "num_steps_per_env": steps,
        "save_interval": 10**9,
        "obs_groups": {"actor": ["policy"], "critic": ["policy"]},
        "algorithm": {
            "class_name": "PPO",
            "num_learning_epochs": epochs,
            "num_mini_batches": minibatches,
        },
        "actor": {**mlp, "distribution_cfg": {"class_name": "GaussianDistribution"}},
        "critic": mlp,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--envs", type=int, default=1024)
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--minibatches", type=int, default=4)
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", help="torch device of env and learner, e.g. cuda")
    a = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    env = CartPoleForRslRl(a.envs, a.seed, a.device)
    runner = OnPolicyRunner(env, train_cfg(a.steps, a.epochs, a.minibatches), None, a.device)
    sync = torch.cuda.synchronize if a.device.startswith("cuda") else (lambda: None)
    runner.learn(a.warmup)
    times = []
    for _ in range(a.iterations):  # one learn() call per iteration, to time each
        sync()
        t0 = time.perf_counter()
        runner.learn(1)
        sync()
        times.append(time.perf_counter() - t0)
    per_it = a.envs * a.steps
    print(
        json.dumps(
            {
                "peer": f"rsl-rl-lib {importlib.metadata.version('rsl-rl-lib')}",
                "envs": a.envs,
                "steps": a.steps,
                "epochs": a.epochs,
                "minibatches": a.minibatches,
                "device": a.device,
                "iterations": a.iterations,
                "sps_median": statistics.median(per_it / t for t in times),
                "sps_mean": per_it * len(times) / sum(times),
                "torch": torch.__version__,
            }
        )
    )


if __name__ == "__main__":
    main()
