"""Sample Factory 2.1.1's APPO on the reference MinAtar: a second peer for distrl's ``minatar-*``
wall-time figures (docs/benchmarks.md, "MinAtar (pixels)"), beside peers/cleanrl_minatar_ppo.py.

    python -m venv /tmp/sfvenv      # not distrl's venv: see below
    /tmp/sfvenv/bin/pip install sample-factory==2.1.1 torch==2.13.0 minatar==1.0.15 \\
        --extra-index-url https://download.pytorch.org/whl/cpu
    /tmp/sfvenv/bin/python peers/sample_factory_minatar.py --game breakout \\
        --total-timesteps 491520 --seed 0 --quiet

Why its own venv: sample-factory 2.1.1 requires numpy<2 and gymnasium<1.0, and distrl's
constraints.txt pins numpy 2.4.6 and gymnasium 1.4.0; the pip line resolves to numpy 1.26.4 and
gymnasium 0.29.1. Install the three in one pip call (or add "numpy<2"): minatar installed
afterwards on its own pulls the newest pandas (3.1.1) and numpy 2.x with it, past SF's pin.
(minatar logs at import that seaborn is missing: only its rendering needs it.)

What it is: SF's own trainer (``sample_factory.train.make_runner``, the body of ``run_rl``, with
this script's observers), asynchronous APPO as SF runs it by default: ``--num-workers`` rollout
worker processes (2: one per core) x 64/num-workers envs each, split in 2 halves that take turns
(``worker_num_splits=2``, SF's double buffering: one half steps while the other's actions are
computed), one inference worker process and one learner process (1 torch thread each), all on
the CPU (``--device cpu``), no wandb. Experiments (config, log, TensorBoard, the final
checkpoint) go under ``--train-dir``, by default a temporary folder removed at the end.

The env: the reference ``minatar`` package (1.0.15) through its own Gymnasium env
(``minatar.gym.BaseEnv``, as ``MinAtar/<Game>-v1``: ``Environment(game,
sticky_action_prob=0.1)`` and the minimal action set), in a ``TimeLimit`` of 1000 steps (10,000
for Freeway) as the CleanRL peer and distrl. Observations: the bool H x W x C grid as a uint8
C x H x W array (channels first, as SF's convolutions expect; SF converts it to float32 before
the network, uint8 keeps its shared-memory buffers 4x smaller). SF resets and seeds each env
itself (env i of the run: ``reset(seed=i)``); here that seed becomes ``1000 x --seed + i`` so that
seeds differ between runs. MinAtar has no frameskip (``env_frameskip=1``): SF's env steps are
env steps.

The model: MinAtar's CNN (Young & Tian 2019) as distrl's ``minatar-cnn`` and the CleanRL peer
use it (conv 16 filters 3x3 stride 1 + ReLU, flatten, linear 128 + ReLU) as SF's encoder,
``--use_rnn False`` (identity core), no decoder layers, and SF's default heads (a linear critic
and a linear layer of action logits).

Hyperparameters: distrl's ``minatar-*`` defaults (``envs/tuned.py``, ``_minatar``) in
SF's terms: 64 envs, ``rollout=128``; a training batch of 64 x 128 = 8192 transitions in
``num_batches_per_epoch=8`` minibatches of ``batch_size=1024``, ``num_epochs=4``, reshuffled every
epoch (``shuffle_minibatches=True``); Adam lr 5e-4 (eps 1e-5) linear to 0; gamma 0.99, GAE lambda
0.95, ``ppo_clip_ratio=0.2``, value clip ``ppo_clip_value=0.2``, entropy
``exploration_loss_coeff=0.01``, ``max_grad_norm=0.5``, ``value_loss_coeff=0.25`` (distrl's value
loss is 0.5 x vf_coef x MSE with vf_coef 0.5, CleanRL's form; SF's is value_loss_coeff x MSE);
no observation normalization (``normalize_input=False``: the grids are 0/1, distrl's
``obs_normalization=False``) and no return normalization (``normalize_returns=False``: distrl's
``reward_normalization=False``, raw returns as value targets). The run stops after
ceil(total / 8192) training batches, as distrl's ``--agent.total-timesteps``: an observer stops
SF when its learner finishes that batch (SF's own ``train_for_env_steps`` test sees the env
steps of the batch before, so it would train two batches more).

Where SF differs from distrl (and what could not be matched):

- Asynchronous and off-policy: the rollout workers keep collecting with the policy they have
  while the learner trains (``async_rl=True``, up to ``num_batches_to_accumulate=2`` batches
  queued), so a batch mixes transitions from policies up to a few updates old (a 300k-step
  Breakout run logged lags of up to 93 policy versions, i.e. SGD steps: ~3 batches of 32).
  V-trace is off (SF's default, ``with_vtrace=False``): GAE on those transitions, the PPO ratio
  against the policy that acted. distrl (and the CleanRL peer) alternate rollout and update,
  on-policy. Steps collected but not yet trained when the run stops are not in ``env_steps``.
- LR schedule: SF 2.1.1's learner has ``LinearDecayScheduler`` (per minibatch, lr 5e-4 to 0 over
  ``train_for_env_steps // batch_size x num_epochs`` SGD steps) but its ``--lr_schedule`` choices
  omit ``linear_decay``; this script sets it as the parser's default, which argparse does not
  check against the choices. distrl decays per iteration (the last iteration at lr/1221).
- PPO ratio clip: SF clips to [1/(1+eps), 1+eps] = [0.833, 1.2], not [0.8, 1.2].
- Advantages: normalized per minibatch (SF, like CleanRL), not over the whole batch (distrl).
- Truncation: ``value_bootstrap=True`` adds gamma x V(s_t) of the last observation before the
  time limit to its reward; distrl bootstraps from the value of the final observation s_{t+1}.
- Initialization: SF's orthogonal init, gain 1 for every layer (heads included); distrl and
  CleanRL use gain sqrt(2) for the hidden layers, 0.01 for the actor head, 1 for the critic.
- Start: SF's startup decorrelation (``decorrelate_envs_on_one_worker``, up to 128 x 31 random
  steps per env, not counted) is off, so all envs start at step 0 as in distrl. Checkpoints:
  only the final one (``save_every_sec`` and ``save_best_after`` set past any run).
- Env stepping: one Python env object per env, stepped by SF's non-batched sampler (SF's default
  for Gymnasium envs, ``batched_sampling=False``), inference in its own process; distrl steps its
  64 MinAtar games as batched torch tensors in the training process.

Any further ``--snake_case`` flags are passed to SF's parser as they are (e.g.
``--with_vtrace True``, ``--async_rl False``), after this script's settings.

Prints one JSON line at the end: ``{"peer": "sample-factory-2.1.1-appo", "game", "env_steps"
(transitions the learner trained on: batches x 8192), "wall_s" (SF's whole run, measured here
with time.perf_counter around ``runner.init()`` and ``runner.run()``: from the start of SF's
env-info process and its worker processes to the last of them joined), "env_steps_per_s"
(env_steps / wall_s), "return_mean_100" (the mean return of the last 100 finished episodes, from
SF's per-episode reports: the sum of each episode's raw rewards), "episodes" (finished episodes
reported), "seed", ...}``, with ``first_iteration_s`` (start-up and the first batch) and
``shutdown_s`` (from the last batch trained to the end) beside wall_s. One line per training
batch before it unless ``--quiet``; SF logs on stderr (with ``--quiet``, its warnings only).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import shutil
import sys
import tempfile
import time
import warnings
from collections import deque
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from sample_factory.algo.runners.runner import AlgoObserver, Runner
from sample_factory.algo.utils.context import global_model_factory
from sample_factory.algo.utils.misc import EPISODIC, ExperimentStatus
from sample_factory.cfg.arguments import parse_full_cfg, parse_sf_args
from sample_factory.envs.env_utils import register_env
from sample_factory.model.encoder import Encoder
from sample_factory.train import make_runner
from sample_factory.utils.utils import log as sf_log
from torch import nn

PEER = "sample-factory-2.1.1-appo"

GAMES = {  # --game -> (MinAtar/<Name>-v1, time limit)
    "asterix": ("Asterix", 1000),
    "breakout": ("Breakout", 1000),
    "freeway": ("Freeway", 10_000),  # Freeway ends itself at step 2501
    "seaquest": ("Seaquest", 1000),
    "space_invaders": ("SpaceInvaders", 1000),
}
ENV_PREFIX = "minatar_"  # SF env names: minatar_<game>
NUM_ENVS = 64
ROLLOUT = 128
NUM_MINIBATCHES = 8
BATCH = NUM_ENVS * ROLLOUT  # transitions per training batch (distrl's iteration)

_QUIET_ENV = "SF_MINATAR_PEER_QUIET"  # set by --quiet, read again in SF's spawned processes
if os.environ.get(_QUIET_ENV) == "1":
    sf_log.setLevel(logging.WARNING)
    # SF's learner logs each minibatch's loss with float() on a tensor that requires grad
    warnings.filterwarnings("ignore", message="Converting a tensor with requires_grad")


def parse_args() -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.add_argument("--game", default="breakout", choices=sorted(GAMES))
    p.add_argument("--total-timesteps", type=int, default=10_000_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num-workers", type=int, default=2, help="rollout worker processes")
    p.add_argument("--train-dir", default=None, help="default: a temporary folder, removed")
    p.add_argument("--quiet", action="store_true", help="no per-batch lines, SF logs warnings only")
    args, sf_extra = p.parse_known_args()
    per_worker, rest = divmod(NUM_ENVS, args.num_workers)
    if args.num_workers < 1 or rest or per_worker % 2:
        p.error(f"--num-workers must split {NUM_ENVS} envs into even counts per worker")
    args.iterations = max(1, math.ceil(args.total_timesteps / BATCH))
    return args, sf_extra


class MinAtarForSF(gym.Wrapper):
    """A time-limited ``MinAtar/<Game>-v1`` with channels-first uint8 observations, whose seeds
    (SF passes env i ``seed=i``) are offset by the run's seed."""

    # a single-agent env, said here so that SF's lookups do not reach Gymnasium's deprecated
    # attribute forwarding through the wrappers below (a warning per env)
    num_agents = 1
    is_multiagent = False

    def __init__(self, env: gym.Env, run_seed: int):
        super().__init__(env)
        h, w, c = env.observation_space.shape
        self.observation_space = gym.spaces.Box(0, 1, (c, h, w), dtype=np.uint8)
        self.run_seed = run_seed

    @staticmethod
    def _obs(grid: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(grid.transpose(2, 0, 1), dtype=np.uint8)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            seed = 1000 * self.run_seed + seed
        obs, info = self.env.reset(seed=seed, options=options)
        return self._obs(obs), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._obs(obs), reward, terminated, truncated, info


def make_minatar(full_env_name: str, cfg=None, env_config=None, render_mode=None) -> gym.Env:
    """SF's env factory (``register_env``): ``full_env_name`` is ``minatar_<game>``."""
    from minatar.gym import BaseEnv  # the reference's Gymnasium env (MinAtar/<Game>-v1)

    game = full_env_name[len(ENV_PREFIX) :]
    env = BaseEnv(game, use_minimal_action_set=True, sticky_action_prob=0.1)
    env = gym.wrappers.TimeLimit(env, GAMES[game][1])
    seed = cfg.seed if cfg is not None and cfg.seed is not None else 0
    return MinAtarForSF(env, seed)


class MinAtarEncoder(Encoder):
    """MinAtar's network up to its hidden layer: conv 16x3x3 stride 1 + ReLU, flatten, linear 128
    + ReLU (SF adds the heads, and initializes every layer)."""

    def __init__(self, cfg, obs_space):
        super().__init__(cfg)
        c, h, w = obs_space["obs"].shape
        self.net = nn.Sequential(
            nn.Conv2d(c, 16, 3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(16 * (h - 2) * (w - 2), 128),
            nn.ReLU(),
        )

    def forward(self, obs_dict: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.net(obs_dict["obs"])

    def get_out_size(self) -> int:
        return 128


def make_encoder(cfg, obs_space) -> Encoder:
    return MinAtarEncoder(cfg, obs_space)


def sf_argv(args: argparse.Namespace, experiment: str, train_dir: str) -> list[str]:
    """SF's command line for the run: distrl's minatar settings in SF's flags."""
    settings: dict[str, Any] = {
        "algo": "APPO",
        "env": ENV_PREFIX + args.game,
        "experiment": experiment,
        "train_dir": train_dir,
        "restart_behavior": "overwrite",
        "device": "cpu",
        "seed": args.seed,
        "num_workers": args.num_workers,
        "num_envs_per_worker": NUM_ENVS // args.num_workers,
        "worker_num_splits": 2,
        "rollout": ROLLOUT,
        "batch_size": BATCH // NUM_MINIBATCHES,
        "num_batches_per_epoch": NUM_MINIBATCHES,
        "num_epochs": 4,
        "shuffle_minibatches": True,
        "use_rnn": False,
        "nonlinearity": "relu",
        "learning_rate": 5e-4,
        "adam_eps": 1e-5,
        "gamma": 0.99,
        "gae_lambda": 0.95,
        "ppo_clip_ratio": 0.2,
        "ppo_clip_value": 0.2,
        "exploration_loss": "entropy",
        "exploration_loss_coeff": 0.01,
        "value_loss_coeff": 0.25,
        "max_grad_norm": 0.5,
        "normalize_input": False,
        "normalize_returns": False,
        "value_bootstrap": True,
        "env_frameskip": 1,
        "decorrelate_envs_on_one_worker": False,
        # batches: what the linear LR decay spans; the observer stops the run after them
        "train_for_env_steps": args.iterations * BATCH,
        "save_every_sec": 10**9,
        "save_best_after": 10**15,
        "with_wandb": False,
    }
    return [f"--{k}={v}" for k, v in settings.items()]


class Progress(AlgoObserver):
    """Times the run's batches, stops it after the last, and prints a line per batch."""

    def __init__(self, iterations: int, start: float, returns: deque, quiet: bool):
        self.iterations = iterations
        self.start = start
        self.returns = returns
        self.quiet = quiet
        self.first_at: float | None = None
        self.last_at: float | None = None

    def on_training_step(self, runner: Runner, training_iteration_since_resume: int) -> None:
        now = time.perf_counter()
        if self.first_at is None:
            self.first_at = now
        self.last_at = now
        it = training_iteration_since_resume
        if not self.quiet:
            elapsed = now - self.start
            line = {
                "iteration": it,
                "env_steps": it * BATCH,
                "sps": round(it * BATCH / elapsed),
                "return_mean_100": float(np.mean(self.returns)) if self.returns else None,
            }
            print(json.dumps(line), flush=True)
        if it >= self.iterations:
            runner._stop_training()  # SF's own end of training (private in 2.1.1)


def main() -> int:
    args, sf_extra = parse_args()
    if args.quiet:
        os.environ[_QUIET_ENV] = "1"  # inherited by SF's spawned processes
        sf_log.setLevel(logging.WARNING)
        warnings.filterwarnings("ignore", message="Converting a tensor with requires_grad")

    for game in GAMES:
        register_env(ENV_PREFIX + game, make_minatar)
    global_model_factory().register_encoder_factory(make_encoder)

    if args.train_dir is not None:
        return train(args, sf_extra, args.train_dir, keep=True)
    train_dir = tempfile.mkdtemp(prefix="sf-minatar-")
    try:
        return train(args, sf_extra, train_dir, keep=False)
    finally:
        shutil.rmtree(train_dir, ignore_errors=True)


def train(args: argparse.Namespace, sf_extra: list[str], train_dir: str, keep: bool) -> int:
    """One SF run under ``train_dir``; prints its JSON line and returns the exit status."""
    experiment = f"minatar_{args.game}_s{args.seed}_{time.strftime('%Y%m%d-%H%M%S')}"
    argv = sf_argv(args, experiment, train_dir) + sf_extra
    parser, _ = parse_sf_args(argv)
    parser.set_defaults(lr_schedule="linear_decay")  # in SF's learner, not in its choices
    cfg = parse_full_cfg(parser, argv)

    returns: deque[float] = deque(maxlen=100)
    episodes = 0

    def on_episode(runner: Runner, msg: dict, policy_id: int) -> None:
        nonlocal episodes
        returns.append(float(msg[EPISODIC]["reward"]))
        episodes += 1

    start = time.perf_counter()
    cfg, runner = make_runner(cfg)
    progress = Progress(args.iterations, start, returns, args.quiet)
    runner.register_observer(progress)
    runner.register_episodic_stats_handler(on_episode)
    status = runner.init()
    if status == ExperimentStatus.SUCCESS:
        status = runner.run()
    end = time.perf_counter()
    wall = end - start

    env_steps = int(runner.env_steps.get(0, 0))
    result = {
        "peer": PEER,
        "game": args.game,
        "env_id": f"MinAtar/{GAMES[args.game][0]}-v1",
        "seed": args.seed,
        "status": int(status),
        "num_workers": args.num_workers,
        "iterations": env_steps // BATCH,
        "env_steps": env_steps,
        "wall_s": round(wall, 3),
        "env_steps_per_s": round(env_steps / wall, 1),
        "first_iteration_s": (
            round(progress.first_at - start, 3) if progress.first_at is not None else None
        ),
        "shutdown_s": round(end - progress.last_at, 3) if progress.last_at is not None else None,
        "return_mean_100": round(float(np.mean(returns)), 3) if returns else None,
        "episodes": episodes,
        "experiment_dir": os.path.join(train_dir, experiment) if keep else None,
        "sample_factory": _version("sample-factory"),
        "minatar": _version("minatar"),
        "gymnasium": gym.__version__,
        "numpy": np.__version__,
        "torch": torch.__version__,
    }
    print(json.dumps(result), flush=True)
    return 0 if status == ExperimentStatus.SUCCESS else 1


def _version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    sys.exit(main())
