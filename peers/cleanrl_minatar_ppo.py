"""A CleanRL-style single-file PyTorch PPO on the reference MinAtar: the peer for distrl's
``minatar-*`` wall-time figures (docs/benchmarks.md, "MinAtar (pixels)").

    pip install -c constraints.txt minatar==1.0.15   # beside distrl (gymnasium, torch)
    python peers/cleanrl_minatar_ppo.py --game breakout --total-timesteps 491520 --seed 0 \\
        --threads 1

(minatar logs at import that seaborn and matplotlib are missing: only its rendering needs them.)

What it is: PPO laid out as CleanRL's ``ppo.py`` / ``ppo_atari.py`` (one script, one loop:
rollout, GAE, K epochs of shuffled minibatches; orthogonal init, actor head gain 0.01, critic
1; advantages normalized per minibatch; clipped value loss; LR annealed linearly to 0), written
here, not copied. The env is the reference ``minatar`` package (1.0.15) through its own
Gymnasium env (``minatar.gym.BaseEnv``: ``Environment(game, sticky_action_prob=0.1)`` and the
minimal action set, ``MinAtar/<Game>-v1``), each wrapped in a ``TimeLimit`` of 1000 steps (10,000
for Freeway, as distrl) and ``RecordEpisodeStatistics``, and stepped by
``gymnasium.vector.SyncVectorEnv`` (a Python loop over numpy envs) with same-step autoreset, the
Gymnasium 0.29 behaviour CleanRL's scripts were written for.

Hyperparameters: distrl's ``minatar-*`` defaults (``envs/tuned.py``, ``_minatar``):
64 envs x 128 steps, 4 epochs x 8 minibatches, Adam lr 5e-4 (eps 1e-5) linear to 0, gamma
0.99, GAE lambda 0.95, clip 0.2, entropy 0.01, value 0.5, grad norm 0.5; MinAtar's CNN (conv
16x3x3 stride 1 + ReLU, flatten, linear 128 + ReLU, linear heads). Iterations:
ceil(total / 8192), as distrl's ``--agent.total-timesteps``.

How it differs from distrl: distrl's MinAtar games are batched torch tensors (all 64 envs in a
few tensor ops per step, checked step for step against this reference), here each env is a
Python object stepped in a loop and its grid copied into torch each step. As in CleanRL, a
time-limit truncation is treated as a termination (no bootstrap from the final observation;
distrl bootstraps it) and advantages are normalized per minibatch (distrl: over the whole batch).
At Breakout's early returns episodes seldom reach 1000 steps, so neither changes the work done.

Prints one JSON line at the end: ``{"peer": ..., "env_steps", "wall_s" (training: from the first
reset to the end of the last update), "env_steps_per_s", "rollout_s" and "update_s" (the
rollouts' time and the updates', GAE included, as distrl's time/rollout and time/learn),
"return_mean_100" (the last 100 finished episodes), "episodes", ...}``; one line per iteration
before it unless ``--quiet``.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from collections import deque

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
from torch.distributions.categorical import Categorical

GAMES = {  # --game -> (MinAtar/<Name>-v1, time limit)
    "asterix": ("Asterix", 1000),
    "breakout": ("Breakout", 1000),
    "freeway": ("Freeway", 10_000),  # Freeway ends itself at step 2501
    "seaquest": ("Seaquest", 1000),
    "space_invaders": ("SpaceInvaders", 1000),
}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--game", default="breakout", choices=sorted(GAMES))
    p.add_argument("--total-timesteps", type=int, default=10_000_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--num-steps", type=int, default=128)
    p.add_argument("--update-epochs", type=int, default=4)
    p.add_argument("--num-minibatches", type=int, default=8)
    p.add_argument("--learning-rate", type=float, default=5e-4)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--gae-lambda", type=float, default=0.95)
    p.add_argument("--clip-coef", type=float, default=0.2)
    p.add_argument("--ent-coef", type=float, default=0.01)
    p.add_argument("--vf-coef", type=float, default=0.5)
    p.add_argument("--max-grad-norm", type=float, default=0.5)
    p.add_argument("--max-episode-steps", type=int, default=None, help="default: the game's")
    p.add_argument("--quiet", action="store_true", help="no per-iteration lines")
    args = p.parse_args()
    args.batch_size = args.num_envs * args.num_steps
    args.minibatch_size = args.batch_size // args.num_minibatches
    args.num_iterations = max(1, math.ceil(args.total_timesteps / args.batch_size))
    return args


def make_env(game: str, max_episode_steps: int):
    def thunk() -> gym.Env:
        from minatar.gym import BaseEnv  # the reference's Gymnasium env (MinAtar/<Game>-v1)

        env = BaseEnv(game, use_minimal_action_set=True, sticky_action_prob=0.1)
        env = gym.wrappers.TimeLimit(env, max_episode_steps)
        return gym.wrappers.RecordEpisodeStatistics(env)

    return thunk


def to_nchw(grids: np.ndarray) -> torch.Tensor:
    """The envs' bool grids [N, H, W, C] as contiguous float [N, C, H, W]: the convolution's
    layout (a permuted view in the network made each minibatch's forward and backward ~1.3x
    slower on this machine's CPU)."""
    return torch.from_numpy(grids).permute(0, 3, 1, 2).to(torch.float32).contiguous()


def layer_init(layer: nn.Module, std: float = math.sqrt(2), bias: float = 0.0) -> nn.Module:
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias)
    return layer


class Agent(nn.Module):
    """MinAtar's network (Young & Tian 2019) with linear actor and critic heads."""

    def __init__(self, obs_shape: tuple[int, int, int], num_actions: int):
        super().__init__()
        c, h, w = obs_shape
        self.network = nn.Sequential(
            layer_init(nn.Conv2d(c, 16, 3, stride=1)),
            nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(16 * (h - 2) * (w - 2), 128)),
            nn.ReLU(),
        )
        self.actor = layer_init(nn.Linear(128, num_actions), std=0.01)
        self.critic = layer_init(nn.Linear(128, 1), std=1.0)

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(self.network(x))

    def get_action_and_value(self, x: torch.Tensor, action: torch.Tensor | None = None):
        hidden = self.network(x)
        probs = Categorical(logits=self.actor(hidden))
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(hidden)


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device("cpu")

    name, limit = GAMES[args.game]
    envs = gym.vector.SyncVectorEnv(
        [make_env(args.game, args.max_episode_steps or limit) for _ in range(args.num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    assert isinstance(envs.single_action_space, gym.spaces.Discrete)
    h, w, c = envs.single_observation_space.shape  # MinAtar grids are H x W x C
    obs_shape = (c, h, w)
    agent = Agent(obs_shape, int(envs.single_action_space.n)).to(device)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    # rollout storage
    obs = torch.zeros((args.num_steps, args.num_envs) + obs_shape)
    actions = torch.zeros((args.num_steps, args.num_envs), dtype=torch.long)
    logprobs = torch.zeros((args.num_steps, args.num_envs))
    rewards = torch.zeros((args.num_steps, args.num_envs))
    dones = torch.zeros((args.num_steps, args.num_envs))
    values = torch.zeros((args.num_steps, args.num_envs))

    episode_returns: deque[float] = deque(maxlen=100)
    episodes = 0
    global_step = 0
    rollout_s = update_s = 0.0  # the two phases' time, beside distrl's time/rollout, time/learn
    start_time = time.perf_counter()
    next_obs_np, _ = envs.reset(seed=args.seed)
    next_obs = to_nchw(next_obs_np)
    next_done = torch.zeros(args.num_envs)

    for iteration in range(1, args.num_iterations + 1):
        frac = 1.0 - (iteration - 1.0) / args.num_iterations
        optimizer.param_groups[0]["lr"] = frac * args.learning_rate

        t0 = time.perf_counter()
        for step in range(args.num_steps):
            global_step += args.num_envs
            obs[step] = next_obs
            dones[step] = next_done
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
            values[step] = value.flatten()
            actions[step] = action
            logprobs[step] = logprob

            next_obs_np, reward, terminations, truncations, infos = envs.step(action.numpy())
            rewards[step] = torch.as_tensor(reward, dtype=torch.float32)
            next_obs = to_nchw(next_obs_np)
            done = np.logical_or(terminations, truncations)
            next_done = torch.as_tensor(done, dtype=torch.float32)

            final = infos.get("final_info")
            if final is not None and "episode" in final:
                ended = final["_episode"]
                for r in final["episode"]["r"][ended]:
                    episode_returns.append(float(r))
                    episodes += 1
        t1 = time.perf_counter()
        rollout_s += t1 - t0

        # GAE(lambda), bootstrapping from the value of the observation after the rollout
        with torch.no_grad():
            next_value = agent.get_value(next_obs).reshape(1, -1)
            advantages = torch.zeros_like(rewards)
            lastgaelam = torch.zeros(args.num_envs)
            for t in reversed(range(args.num_steps)):
                if t == args.num_steps - 1:
                    nextnonterminal, nextvalues = 1.0 - next_done, next_value
                else:
                    nextnonterminal, nextvalues = 1.0 - dones[t + 1], values[t + 1]
                delta = rewards[t] + args.gamma * nextvalues * nextnonterminal - values[t]
                lastgaelam = delta + args.gamma * args.gae_lambda * nextnonterminal * lastgaelam
                advantages[t] = lastgaelam
            returns = advantages + values

        b_obs = obs.reshape((-1,) + obs_shape)
        b_logprobs = logprobs.reshape(-1)
        b_actions = actions.reshape(-1)
        b_advantages = advantages.reshape(-1)
        b_returns = returns.reshape(-1)
        b_values = values.reshape(-1)

        b_inds = np.arange(args.batch_size)
        for _epoch in range(args.update_epochs):
            np.random.shuffle(b_inds)
            for start in range(0, args.batch_size, args.minibatch_size):
                mb = torch.as_tensor(b_inds[start : start + args.minibatch_size])
                _, newlogprob, entropy, newvalue = agent.get_action_and_value(
                    b_obs[mb], b_actions[mb]
                )
                logratio = newlogprob - b_logprobs[mb]
                ratio = logratio.exp()

                mb_adv = b_advantages[mb]
                mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
                pg_loss = torch.max(
                    -mb_adv * ratio,
                    -mb_adv * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef),
                ).mean()

                newvalue = newvalue.view(-1)
                v_unclipped = (newvalue - b_returns[mb]) ** 2
                v_clipped = b_values[mb] + torch.clamp(
                    newvalue - b_values[mb], -args.clip_coef, args.clip_coef
                )
                v_loss = 0.5 * torch.max(v_unclipped, (v_clipped - b_returns[mb]) ** 2).mean()

                loss = pg_loss - args.ent_coef * entropy.mean() + args.vf_coef * v_loss
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()
        update_s += time.perf_counter() - t1

        if not args.quiet:
            elapsed = time.perf_counter() - start_time
            mean = float(np.mean(episode_returns)) if episode_returns else None
            print(
                json.dumps(
                    {
                        "iteration": iteration,
                        "env_steps": global_step,
                        "sps": round(global_step / elapsed),
                        "return_mean_100": mean,
                    }
                ),
                flush=True,
            )

    wall = time.perf_counter() - start_time
    envs.close()
    print(
        json.dumps(
            {
                "peer": "cleanrl-style PPO, reference minatar + gymnasium SyncVectorEnv",
                "game": args.game,
                "env_id": f"MinAtar/{name}-v1",
                "seed": args.seed,
                "threads": args.threads,
                "iterations": args.num_iterations,
                "env_steps": global_step,
                "wall_s": round(wall, 3),
                "env_steps_per_s": round(global_step / wall, 1),
                "rollout_s": round(rollout_s, 3),
                "update_s": round(update_s, 3),
                "return_mean_100": (
                    round(float(np.mean(episode_returns)), 3) if episode_returns else None
                ),
                "episodes": episodes,
                "minatar": _version("minatar"),
                "gymnasium": gym.__version__,
                "torch": torch.__version__,
            }
        ),
        flush=True,
    )


def _version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    main()
