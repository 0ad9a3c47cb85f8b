"""A CleanRL-style single-file PyTorch PPO on Atari through EnvPool: the peer for distrl's
``atari-breakout`` and ``atari-pong`` figures (end-to-end env-steps/s and returns at a fixed
budget, on the same machine).

    pip install -c constraints.txt -e '.[envpool]'   # distrl with its envpool extra (1.2.5)
    python peers/cleanrl_atari_envpool_ppo.py --game pong --total-timesteps 10000000 --seed 0 \\
        --threads 1 --quiet

What it is: PPO laid out as CleanRL's ``ppo_atari_envpool.py`` (one script, one loop: rollout,
GAE, K epochs of shuffled minibatches; the Nature CNN with orthogonal init, gain sqrt(2) in the
body, 0.01 on the actor head, 1 on the critic head; input scaled by 1/255; advantages normalized
per minibatch; clipped value loss; LR annealed linearly to 0), written here, not copied. The env
is one EnvPool pool of ``--num-envs`` copies of ``<Game>-v5`` (``env_type="gymnasium"``: this
envpool has no ``gym`` to return), stepped synchronously (batch size = num_envs), made with
exactly distrl's options, imported (``envs/envpool_atari.py``, ``SETTINGS``, ``MAX_EPISODE_STEPS``):
CleanRL's ``episodic_life=True, reward_clip=True`` and EnvPool's Atari defaults spelled out (4
frames skipped, max-pooled over the last two; 84x84 grayscale; 4 frames stacked; up to 30
no-ops and FIRE at reset; no sticky actions; the minimal action set; 27,000 steps per game).
EnvPool's worker threads: one per env, at most the CPUs this process may run on, as distrl.
Episode statistics are CleanRL's: raw (unclipped) scores summed over whole games, across lives
(a minimal ``RecordEpisodeStatistics`` of our own, ``GameScores``).

Hyperparameters: distrl's ``atari-*`` defaults (``envs/tuned.py``, ``_atari``), which
are CleanRL's: 8 envs x 128 steps, 4 epochs x 4 minibatches, Adam lr 2.5e-4 (eps 1e-5) linear
to 0, gamma 0.99, GAE lambda 0.95, clip 0.1 (the value loss too), entropy 0.01, value 0.5, grad
norm 0.5. Iterations: ceil(total / (num_envs x num_steps)), as distrl's
``--agent.total-timesteps`` (CleanRL: floor).

env steps are agent steps, each 4 emulator frames, as distrl counts them (10M env steps = 40M
frames).

Where it follows distrl rather than CleanRL (so that both do the same work):
  * Resets. EnvPool resets a done env at its *next* step (that step ignores its action and
    returns the first observation, reward 0). CleanRL's loop spends a policy step on it and
    counts it; here, as in distrl, that reset step is taken at once for the done envs alone
    (``pool.step(zeros, env_id)``) and not counted, so every counted step is a real one and the
    observation after a done step is the next life's (or next game's) first.
  * Time-limit truncation bootstraps: where a game is truncated (27,000 steps) and not
    terminated, gamma V(final observation) is added to that step's reward, the same target as
    distrl's GAE (CleanRL treats it as a termination). Rare: games seldom last that long.
  * The pool is seeded with ``--seed`` (env i gets seed + i); CleanRL leaves EnvPool's 42.
  * Observations are kept as uint8 in rollout storage, as distrl keeps them, and cast and
    scaled in the network (CleanRL stores float32 copies).
Where it differs from distrl: advantages are normalized per minibatch (distrl: over the whole
batch); the loop and the tensors are plain PyTorch on the CPU, one process.

Prints one JSON line at the end: ``{"peer": "cleanrl-style-ppo-atari-envpool", "game",
"env_steps", "wall_s" (training: from the first reset to the end of the last update),
"env_steps_per_s", "rollout_s" and "update_s" (the rollouts' time and the updates', GAE
included, as distrl's time/rollout and time/learn), "return_mean_100" (raw game scores of the
last 100 finished games, null if none), "games", "seed", "threads", ...}``; one line per
iteration before it unless ``--quiet``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import time
from collections import deque

import numpy as np
import torch
import torch.nn as nn
from torch.distributions.categorical import Categorical

# distrl's EnvPool options and step limit themselves: the same work on both sides
from distrl.envs.envpool_atari import MAX_EPISODE_STEPS, SETTINGS

GAMES = {"breakout": "Breakout-v5", "pong": "Pong-v5"}  # --game -> EnvPool id


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--game", default="pong", choices=sorted(GAMES))
    p.add_argument("--total-timesteps", type=int, default=10_000_000, help="agent steps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--device", default="cpu", help="where the network and the batch live")
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--num-steps", type=int, default=128)
    p.add_argument("--update-epochs", type=int, default=4)
    p.add_argument("--num-minibatches", type=int, default=4)
    p.add_argument("--learning-rate", type=float, default=2.5e-4)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--gae-lambda", type=float, default=0.95)
    p.add_argument("--clip-coef", type=float, default=0.1)
    p.add_argument("--ent-coef", type=float, default=0.01)
    p.add_argument("--vf-coef", type=float, default=0.5)
    p.add_argument("--max-grad-norm", type=float, default=0.5)
    p.add_argument("--quiet", action="store_true", help="no per-iteration lines")
    args = p.parse_args()
    args.batch_size = args.num_envs * args.num_steps
    args.minibatch_size = args.batch_size // args.num_minibatches
    args.num_iterations = max(1, math.ceil(args.total_timesteps / args.batch_size))
    return args


class AtariPool:
    """One synchronous EnvPool pool whose done envs come back already reset (distrl's rule).

    ``step`` returns (next_obs uint8 [N, 4, 84, 84], clipped reward, terminated, truncated,
    final_obs, info); ``final_obs`` is the step's own observation (the one that ended an episode
    where it did), ``next_obs`` the same with the done envs' rows replaced by their next
    episode's first observation."""

    def __init__(self, env_id: str, num_envs: int, seed: int):
        import envpool

        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        self.num_threads = min(num_envs, cpus or 1)
        self.pool = envpool.make(
            env_id,
            env_type="gymnasium",
            num_envs=num_envs,
            batch_size=num_envs,
            num_threads=self.num_threads,
            seed=seed,
            max_episode_steps=MAX_EPISODE_STEPS,
            **SETTINGS,
        )
        self.num_actions = int(self.pool.action_space.n)
        self.obs_shape = tuple(self.pool.observation_space.shape)

    def reset(self) -> np.ndarray:
        obs, _ = self.pool.reset()
        return obs

    def step(self, actions: np.ndarray):
        obs, reward, terminated, truncated, info = self.pool.step(actions.astype(np.int32))
        done = terminated | truncated
        next_obs = obs
        if done.any():
            # EnvPool would reset these envs at their next step, ignoring its action: take that
            # step now for them alone (an explicit reset() would restart the game, lives too)
            ids = np.flatnonzero(done).astype(np.int32)
            first, *_, reset_info = self.pool.step(np.zeros(len(ids), np.int32), ids)
            next_obs = obs.copy()
            next_obs[reset_info["env_id"]] = first
        return next_obs, reward, terminated, truncated, obs, info

    def close(self) -> None:
        self.pool.close()


class GameScores:
    """A minimal RecordEpisodeStatistics: each env's raw score and length summed over a whole
    game (all its lives), recorded when the game ends (no lives left, or the step limit)."""

    def __init__(self, num_envs: int, window: int = 100):
        self.score = np.zeros(num_envs, dtype=np.float64)
        self.length = np.zeros(num_envs, dtype=np.int64)
        self.returns: deque[float] = deque(maxlen=window)
        self.games = 0

    def add(self, raw_reward: np.ndarray, game_over: np.ndarray) -> None:
        self.score += raw_reward
        self.length += 1
        if game_over.any():
            self.returns.extend(float(s) for s in self.score[game_over])
            self.games += int(game_over.sum())
            self.score[game_over] = 0.0
            self.length[game_over] = 0

    def mean(self) -> float | None:
        return float(np.mean(self.returns)) if self.returns else None


def layer_init(layer: nn.Module, std: float = math.sqrt(2), bias: float = 0.0) -> nn.Module:
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias)
    return layer


class Agent(nn.Module):
    """The Nature CNN (Mnih et al. 2015) with linear actor and critic heads on its 512 units."""

    def __init__(self, obs_shape: tuple[int, ...], num_actions: int):
        super().__init__()
        c, h, w = obs_shape
        for k, s in ((8, 4), (4, 2), (3, 1)):
            h, w = (h - k) // s + 1, (w - k) // s + 1
        self.network = nn.Sequential(
            layer_init(nn.Conv2d(c, 32, 8, stride=4)),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)),
            nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(64 * h * w, 512)),
            nn.ReLU(),
        )
        self.actor = layer_init(nn.Linear(512, num_actions), std=0.01)
        self.critic = layer_init(nn.Linear(512, 1), std=1.0)

    def hidden(self, x: torch.Tensor) -> torch.Tensor:
        return self.network(x.float() / 255.0)  # uint8 frames in

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(self.hidden(x))

    def get_action_and_value(self, x: torch.Tensor, action: torch.Tensor | None = None):
        hidden = self.hidden(x)
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

    envs = AtariPool(GAMES[args.game], args.num_envs, args.seed)
    obs_shape = envs.obs_shape
    dev = torch.device(args.device)
    agent = Agent(obs_shape, envs.num_actions).to(dev)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    # rollout storage (frames as uint8)
    T, N = args.num_steps, args.num_envs
    obs = torch.zeros((T, N) + obs_shape, dtype=torch.uint8, device=dev)
    actions = torch.zeros((T, N), dtype=torch.long, device=dev)
    logprobs = torch.zeros((T, N), device=dev)
    rewards = torch.zeros((T, N), device=dev)
    dones = torch.zeros((T, N), device=dev)
    values = torch.zeros((T, N), device=dev)

    scores = GameScores(N)
    global_step = 0
    rollout_s = update_s = 0.0  # the two phases' time, beside distrl's time/rollout, time/learn
    start_time = time.perf_counter()
    next_obs = torch.from_numpy(envs.reset()).to(dev)
    next_done = torch.zeros(N, device=dev)

    for iteration in range(1, args.num_iterations + 1):
        frac = 1.0 - (iteration - 1.0) / args.num_iterations
        optimizer.param_groups[0]["lr"] = frac * args.learning_rate

        t0 = time.perf_counter()
        for step in range(T):
            global_step += N
            obs[step] = next_obs
            dones[step] = next_done
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
            values[step] = value.flatten()
            actions[step] = action
            logprobs[step] = logprob

            next_np, reward, terminated, truncated, final_np, info = envs.step(action.cpu().numpy())
            rewards[step] = torch.from_numpy(reward.astype(np.float32)).to(dev)
            cut = truncated & ~terminated
            if cut.any():  # a time limit, not an end: bootstrap from V(final obs), as distrl
                with torch.no_grad():
                    v_final = agent.get_value(torch.from_numpy(final_np[cut]).to(dev)).flatten()
                rewards[step, torch.from_numpy(np.flatnonzero(cut)).to(dev)] += args.gamma * v_final
            next_obs = torch.from_numpy(next_np).to(dev)
            next_done = torch.from_numpy((terminated | truncated).astype(np.float32)).to(dev)
            # whole games: info["terminated"] is the game's end under episodic life
            scores.add(info["reward"], info["terminated"].astype(bool) | truncated)
        t1 = time.perf_counter()
        rollout_s += t1 - t0

        # GAE(lambda), bootstrapping from the value of the observation after the rollout
        with torch.no_grad():
            next_value = agent.get_value(next_obs).reshape(1, -1)
            advantages = torch.zeros_like(rewards)
            lastgaelam = torch.zeros(N, device=dev)
            for t in reversed(range(T)):
                if t == T - 1:
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
                mb = torch.as_tensor(b_inds[start : start + args.minibatch_size], device=dev)
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
        if dev.type == "cuda":  # the queued kernels belong to the update's time
            torch.cuda.synchronize(dev)
        update_s += time.perf_counter() - t1

        if not args.quiet:
            elapsed = time.perf_counter() - start_time
            print(
                json.dumps(
                    {
                        "iteration": iteration,
                        "env_steps": global_step,
                        "sps": round(global_step / elapsed),
                        "return_mean_100": scores.mean(),
                        "games": scores.games,
                    }
                ),
                flush=True,
            )

    wall = time.perf_counter() - start_time
    envs.close()
    mean = scores.mean()
    print(
        json.dumps(
            {
                "peer": "cleanrl-style-ppo-atari-envpool",
                "game": args.game,
                "env_id": GAMES[args.game],
                "seed": args.seed,
                "threads": args.threads,
                "device": args.device,
                "envpool_threads": envs.num_threads,
                "iterations": args.num_iterations,
                "env_steps": global_step,
                "wall_s": round(wall, 3),
                "env_steps_per_s": round(global_step / wall, 1),
                "rollout_s": round(rollout_s, 3),
                "update_s": round(update_s, 3),
                "return_mean_100": None if mean is None else round(mean, 3),
                "games": scores.games,
                "envpool": _version("envpool"),
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
