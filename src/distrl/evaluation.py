"""Evaluation of the deterministic policy, with every episode counted that was decided in advance.

Counting "the first N episodes to finish" over a batch of envs favours short episodes: with 64
envs and N = 10, the ten that end first are kept, and in a task where failing ends an episode
early those are the failures (or, where success ends it, the successes). Here env ``i`` of ``E``
runs exactly its first ``k = ceil(N / E)`` episodes to the end, whatever their length, and
episode ``j`` of env ``i`` is counted when ``j * E + i < N``: which episodes count is fixed
before any of them runs. An env that has run its share keeps stepping (a batched env steps every
row) and its further episodes are ignored.

``evaluate`` is what ``distrl play`` prints and what ``--eval.interval`` logs during training
(``Evaluator``: the main rank, its own env, the RNG streams of training untouched).
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from distrl.envs.core import VecEnv

if TYPE_CHECKING:
    from distrl.config import TrainConfig
    from distrl.policy import ActorCritic

NO_LIMIT_STEPS = 100_000
"""Steps one evaluation may take per episode of an env without a time limit before it fails."""


@dataclass(frozen=True)
class EvalResult:
    returns: torch.Tensor
    """[episodes] undiscounted returns, in the fixed order (episode j of env i at j * E + i)."""
    lengths: torch.Tensor
    """[episodes] steps of each of those episodes."""

    @property
    def mean(self) -> float:
        return float(self.returns.mean())

    @property
    def std(self) -> float:
        return float(self.returns.std()) if self.returns.numel() > 1 else 0.0


def evaluate(
    policy: ActorCritic,
    env: VecEnv,
    episodes: int,
    seed: int,
    before_step: Callable[[], None] | None = None,
) -> EvalResult:
    """Run ``policy.act_deterministic`` in ``env`` (reset with ``seed``) until every env has
    finished its share of the ``episodes`` (module docstring); ``before_step()`` runs before
    every step (``play --video`` takes a frame there)."""
    if episodes < 1:
        raise ValueError(f"episodes must be at least 1, got {episodes}")
    n = env.num_envs
    k = math.ceil(episodes / n)
    limit = k * ((env.max_episode_steps or NO_LIMIT_STEPS) + 1)
    obs = env.reset(seed=seed)
    device = obs.device
    ep_ret = torch.zeros(n, dtype=torch.float64, device=device)
    ep_len = torch.zeros(n, dtype=torch.int64, device=device)
    done_count = torch.zeros(n, dtype=torch.int64, device=device)
    returns = torch.zeros(k, n, dtype=torch.float64, device=device)
    lengths = torch.zeros(k, n, dtype=torch.int64, device=device)
    rows = torch.arange(n, device=device)
    with torch.no_grad():
        for _ in range(limit):
            if bool((done_count >= k).all()):
                break
            if before_step is not None:
                before_step()
            obs, rew, term, trunc, _ = env.step(policy.act_deterministic(obs))
            ep_ret += rew.to(torch.float64)
            ep_len += 1
            finished = (term | trunc) & (done_count < k)
            if finished.any():
                idx = rows[finished]
                returns[done_count[idx], idx] = ep_ret[idx]
                lengths[done_count[idx], idx] = ep_len[idx]
                done_count[idx] += 1
            ended = term | trunc
            ep_ret[ended] = 0.0
            ep_len[ended] = 0
        else:
            raise ValueError(
                f"evaluation: {int((done_count < k).sum())} of {n} envs did not finish "
                f"{k} episode(s) in {limit} steps; give the task a time limit "
                f"(--env.max-episode-steps)"
            )
    # episode j of env i sits at j * n + i: the first `episodes` of that order
    return EvalResult(
        returns.reshape(-1)[:episodes].float().cpu(), lengths.reshape(-1)[:episodes].cpu()
    )


class rng_untouched:
    """Put back torch's, numpy's and ``random``'s global RNG states on exit: what runs inside
    cannot shift the random streams of training."""

    def __enter__(self) -> None:
        self.states = (torch.get_rng_state(), np.random.get_state(), random.getstate())

    def __exit__(self, *exc: object) -> None:
        torch.set_rng_state(self.states[0])
        np.random.set_state(self.states[1])
        random.setstate(self.states[2])


class Evaluator:
    """``--eval.interval``: on the main rank, every ``interval`` iterations and at the last, the
    deterministic policy's ``eval.episodes`` episodes in an env of its own seeded ``eval.seed``
    (the same episodes every time, so the curve compares policies, not draws); the best mean
    return so far is kept as ``checkpoints/best.pt`` (never picked by ``--resume``, never
    pruned; a resumed run reads the best value back from it)."""

    def __init__(self, cfg: TrainConfig, device: torch.device, run_dir: Path | None):
        self.cfg, self.device, self.run_dir = cfg, device, run_dir
        self.env: VecEnv | None = None
        self.best: float | None = None
        self.last_iteration = -1

    def due(self, iteration: int) -> bool:
        interval = self.cfg.eval.interval
        if interval <= 0 or iteration == self.last_iteration:
            return False
        return iteration % interval == 0 or iteration >= self.cfg.agent.max_iterations

    def run(self, policy: ActorCritic) -> dict[str, Any]:
        """The eval/* metrics of the current policy (training mode and RNGs as they were)."""
        from distrl.envs.registry import make_env

        e = self.cfg.eval
        t0 = time.perf_counter()
        with rng_untouched():
            if self.env is None:
                n = min(e.episodes, e.num_envs)
                cfg = dataclasses.replace(
                    self.cfg, env=dataclasses.replace(self.cfg.env, num_envs=n)
                )
                self.env = make_env(cfg, self.device)
            was_training = policy.training
            policy.eval()
            try:
                result = evaluate(policy, self.env, e.episodes, e.seed)
            finally:
                policy.train(was_training)
        return {
            "eval/return_mean": result.mean,
            "eval/return_std": result.std,
            "eval/length_mean": float(result.lengths.float().mean()),
            "eval/time": time.perf_counter() - t0,
        }

    def improved(self, value: float) -> bool:
        """Whether ``value`` beats the best so far (read from best.pt after a resume)."""
        if self.best is None and self.run_dir is not None:
            self.best = best_return(self.run_dir / "checkpoints" / BEST)
        if self.best is not None and value <= self.best:
            return False
        self.best = value
        return True

    def close(self) -> None:
        if self.env is not None:
            self.env.close()
            self.env = None


BEST = "best.pt"


def best_return(path: Path) -> float | None:
    """The eval return a ``best.pt`` was kept for, or None when there is none (or it is not
    readable: a new best then replaces it)."""
    from distrl import checkpoint as ckpt

    if not path.is_file():
        return None
    try:
        value = ckpt.read_manifest(path).get("eval_return_mean")
    except ckpt.CheckpointError:
        return None
    return float(value) if value is not None else None
