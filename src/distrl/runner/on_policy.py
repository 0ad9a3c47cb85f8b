"""The PPO training loop: rollout -> advantages -> update -> log -> checkpoint.

Distribution lives in the ``AllReduceStrategy`` (collectives with their time accounted) and in a
handful of lines here that say which rank writes. The loop itself is the same for 1 and W ranks.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from distrl import checkpoint as ckpt
from distrl.algorithms.ppo import PPO
from distrl.config import TrainConfig, to_dict
from distrl.distributed.allreduce import AllReduceStrategy
from distrl.distributed.context import DistContext, heartbeat, rank_seed
from distrl.envs.core import VecEnv
from distrl.policy import ActorCritic, Moments
from distrl.storage.advantages import gae
from distrl.storage.rollout import RolloutBuffer

WINDOW = 100  # episode statistics over the last 100 completed episodes (SB3's convention)


class NonFiniteEnvError(RuntimeError):
    """An environment produced NaN/Inf; the message names rank, env index, step and field."""


class EnvStepError(RuntimeError):
    """``env.step`` raised; the message names rank, step and (when known) the env index, and the
    original exception is chained as ``__cause__``."""


class OnPolicyRunner:
    def __init__(
        self,
        cfg: TrainConfig,
        ctx: DistContext,
        env: VecEnv,
        telemetry: Any = None,
        run_dir: Path | None = None,
    ):
        self.cfg, self.ctx, self.env, self.tel = cfg, ctx, env, telemetry
        self.run_dir = run_dir
        self.device = ctx.device
        self.strategy = AllReduceStrategy(ctx, cfg.dist.profile_sync, cfg.dist.timeout)
        self.seed = rank_seed(cfg.seed, ctx.rank)
        torch.manual_seed(self.seed)
        # Nothing here draws from numpy or `random`, but checkpoints capture their state: seeded,
        # two runs with one seed write identical checkpoints (and resumes restore them exactly).
        random.seed(self.seed)
        np.random.seed(self.seed % 2**32)
        self.policy = ActorCritic(env.obs_dim, env.action_space, cfg.policy).to(self.device)
        self.ppo = PPO(self.policy, cfg.agent, reducer=self.strategy)
        T, N = cfg.agent.num_steps, env.num_envs
        act_shape = () if env.action_space.discrete else (env.action_space.dim,)
        self.buffer = RolloutBuffer(
            T, N, env.obs_dim, act_shape, env.action_space.discrete, self.device
        )
        # The minibatch shuffle is seeded identically on every rank (see minibatch_indices).
        self.shuffle_gen = torch.Generator().manual_seed(cfg.seed)
        self.shuffle_blocks = 1  # >1 only when one process stands in for several (tests)
        self.obs = env.reset(seed=self.seed)
        z = dict(device=self.device)
        self.ep_return = torch.zeros(N, **z)
        self.ep_length = torch.zeros(N, **z)
        self.done_return = torch.zeros(T, N, **z)
        self.done_length = torch.zeros(T, N, **z)
        # window rows: (return, length, completion key); key -1 marks an empty slot
        self.window = torch.full((WINDOW, 3), -1.0, **z)
        self.iteration = 0
        self.wall_offset = 0.0
        self.last_rollout_time = 0.0
        self.strategy.sync_from_main(self.policy, self.ppo.optimizer)

    # ---- counters ------------------------------------------------------------------------
    @property
    def steps_per_iteration(self) -> int:
        """Env steps of all ranks together in one iteration."""
        return self.cfg.agent.num_steps * self.env.num_envs * self.ctx.world_size

    @property
    def env_steps(self) -> int:
        return self.iteration * self.steps_per_iteration

    # ---- rollout ---------------------------------------------------------------------------
    @torch.inference_mode()  # cheaper per op than no_grad; writes into normal buffers are fine
    def rollout(self) -> None:
        buf, policy, env = self.buffer, self.policy, self.env
        obs = self.obs
        for t in range(buf.num_steps):
            actions, logp, value = policy.act(obs)
            try:
                next_obs, reward, terminated, truncated, info = env.step(policy.env_action(actions))
            except Exception as e:
                raise EnvStepError(self._env_failure(t, e)) from e
            buf.obs[t] = obs
            buf.actions[t] = actions
            buf.logprobs[t] = logp
            buf.values[t] = value
            buf.rewards[t] = reward
            buf.terminated[t] = terminated
            buf.truncated[t] = truncated
            if truncated.any():  # rare; bootstrap from V(final obs), not from the reset state
                idx = truncated.nonzero().squeeze(-1)
                buf.final_values[t, idx] = policy.value(info["final_obs"][idx])
            done = terminated | truncated
            self.ep_return += reward
            self.ep_length += 1
            self.done_return[t] = self.ep_return
            self.done_length[t] = self.ep_length
            self.ep_return.masked_fill_(done, 0.0)
            self.ep_length.masked_fill_(done, 0.0)
            obs = next_obs
        self.obs = obs

    def _env_failure(self, t: int, e: Exception) -> str:
        step = self.iteration * self.buffer.num_steps + t
        # Envs may say which sub-env failed (FaultyEnv does); Gymnasium's vector envs do not.
        index = getattr(e, "env_index", None)
        where = f" in env {index}" if index is not None else ""
        return (
            f"rank {self.ctx.rank}: env step {step} failed{where} (iteration {self.iteration}, "
            f"rollout step {t}): {type(e).__name__}: {e}"
        )

    def check_finite(self) -> None:
        """NaN/Inf from the env stops training here, before the update sees it."""
        buf = self.buffer
        fields = {"observation": buf.obs, "reward": buf.rewards}
        for name, x in fields.items():
            bad = ~torch.isfinite(x)
            if bad.any():
                while bad.dim() > 2:
                    bad = bad.any(-1)
                t, n = (int(v) for v in bad.nonzero()[0])
                if name == "observation":  # obs[t] was returned by the env at step t-1
                    t -= 1
                step = self.iteration * buf.num_steps + t
                raise NonFiniteEnvError(
                    f"rank {self.ctx.rank}: env {n} returned a non-finite {name} at step {step} "
                    f"(iteration {self.iteration}, rollout step {t}); the update was not run"
                )
        if not torch.isfinite(self.obs).all():
            n = int((~torch.isfinite(self.obs)).reshape(self.obs.shape[0], -1).any(-1).nonzero()[0])
            step = (self.iteration + 1) * buf.num_steps - 1
            raise NonFiniteEnvError(
                f"rank {self.ctx.rank}: env {n} returned a non-finite observation at step {step}"
            )

    # ---- learning --------------------------------------------------------------------------
    def learn_step(self) -> dict[str, float | None]:
        """Advantages, the PPO update, then the normalizer moves to this rollout's statistics.

        The rollout's observation moments and every rank's episode window travel inside the
        update's statistics all-reduce: one collective per iteration besides the gradients."""
        buf, a = self.buffer, self.cfg.agent
        with torch.no_grad():
            last_values = self.policy.value(self.obs)
            buf.advantages, buf.returns = gae(
                buf.rewards,
                buf.values,
                buf.terminated,
                buf.truncated,
                buf.final_values,
                last_values,
                a.gamma,
                a.gae_lambda,
            )
        obs_dim = buf.obs.shape[-1]
        moments = Moments.of(buf.obs.reshape(-1, obs_dim)).to_flat()
        extra = torch.cat([moments, self._episode_slots().reshape(-1)])
        metrics = self.ppo.update(buf, self.shuffle_gen, self.shuffle_blocks, extra=extra)
        k = moments.numel()
        if self.policy.normalizer.enabled:  # count-weighted merge across ranks
            self.policy.normalizer.update(Moments.from_flat_sum(extra[:k]))
        return {**metrics, **self._episode_summary(extra[k:].view(self.ctx.world_size, -1))}

    def _episode_slots(self) -> torch.Tensor:
        """[W, 1 + 3*WINDOW] float64, zero except this rank's row: (rollout time, window rows
        (return, length, completion key)). Summed over ranks it is every rank's row."""
        T = self.buffer.num_steps
        mask = self.buffer.terminated | self.buffer.truncated  # episodes that ended
        if mask.any():
            key = self.iteration * T + torch.arange(T, device=self.device, dtype=torch.float32)
            key = key.unsqueeze(1).expand_as(mask)
            new = torch.stack([self.done_return[mask], self.done_length[mask], key[mask]], 1)
            self.window = torch.cat([self.window, new])[-WINDOW:]
        slots = torch.zeros(
            self.ctx.world_size, 1 + 3 * WINDOW, dtype=torch.float64, device=self.device
        )
        slots[self.ctx.rank, 0] = self.last_rollout_time
        slots[self.ctx.rank, 1:] = self.window.reshape(-1)
        return slots

    @staticmethod
    def _episode_summary(everyone: torch.Tensor) -> dict[str, float | None]:
        """Means over the newest WINDOW episodes of all ranks; the slowest rank's rollout."""
        rollout_max = float(everyone[:, 0].max())
        rows = everyone[:, 1:].reshape(-1, 3)
        rows = rows[rows[:, 2] >= 0]
        if rows.shape[0] == 0:
            return {
                "episode_return_mean": None,
                "episode_length_mean": None,
                "time/rollout_max": rollout_max,
            }
        newest = rows[torch.argsort(rows[:, 2], descending=True, stable=True)[:WINDOW]]
        return {
            "episode_return_mean": float(newest[:, 0].mean()),
            "episode_length_mean": float(newest[:, 1].mean()),
            "time/rollout_max": rollout_max,
        }

    # ---- checkpoints -----------------------------------------------------------------------
    def rank_state(self) -> dict[str, Any]:
        """What differs per rank: env state, RNG, current observation, episode bookkeeping."""
        return {
            "env": self.env.state_dict(),
            "rng": ckpt.capture_rng_state(),
            "obs": self.obs.cpu(),
            "ep_return": self.ep_return.cpu(),
            "ep_length": self.ep_length.cpu(),
            "window": self.window.cpu(),
        }

    def load_rank_state(self, s: dict[str, Any]) -> None:
        self.env.load_state_dict(s["env"])
        ckpt.restore_rng_state(s["rng"])
        self.obs = s["obs"].to(self.device)
        self.ep_return = s["ep_return"].to(self.device)
        self.ep_length = s["ep_length"].to(self.device)
        self.window = s["window"].to(self.device)

    def save(self, wall_time: float) -> Path | None:
        ranks = self.strategy.gather_object(self.rank_state())
        if not self.ctx.is_main or self.run_dir is None:
            return None
        state = {
            "policy": self.policy.state_dict(),
            "ppo": self.ppo.state_dict(),
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "wall_time": wall_time,
            "shuffle_rng": self.shuffle_gen.get_state(),
            "ranks": ranks,
        }
        cfg_dict = to_dict(self.cfg)
        meta = {
            "task": self.cfg.task,
            "world_size": self.ctx.world_size,
            "env_steps": self.env_steps,
            "config": cfg_dict,
            "config_hash": ckpt.config_hash(cfg_dict),
        }
        return ckpt.save_checkpoint(self.run_dir / "checkpoints", self.iteration, state, meta)

    def load(self, path: Path) -> list[str]:
        """Load the checkpoint every rank was told to load; returns notes on changed fields."""
        state, manifest = ckpt.load_checkpoint(path, map_location="cpu")
        notes = ckpt.check_resume_compatible(manifest, to_dict(self.cfg), self.ctx.world_size)
        self.policy.load_state_dict(state["policy"])
        self.ppo.load_state_dict(state["ppo"])
        self.iteration = int(state["iteration"])
        self.wall_offset = float(state["wall_time"])
        self.shuffle_gen.set_state(state["shuffle_rng"])
        self.load_rank_state(state["ranks"][self.ctx.rank])
        return notes

    # ---- the loop -------------------------------------------------------------------------
    def learn(self) -> dict[str, Any]:
        cfg, strategy = self.cfg, self.strategy
        max_it = cfg.agent.max_iterations
        start = time.perf_counter() - self.wall_offset
        record: dict[str, Any] = {}
        strategy.take_times()
        while self.iteration < max_it:
            if strategy.active:
                heartbeat(self.ctx, self.iteration)
            self.ppo.schedule_lr(self.iteration)
            t0 = time.perf_counter()
            self.rollout()
            t_rollout = self.last_rollout_time = time.perf_counter() - t0
            if cfg.env.check_finite:
                self.check_finite()
            t1 = time.perf_counter()
            metrics = self.learn_step()
            t_update = time.perf_counter() - t1
            comm, sync = strategy.take_times()
            self.iteration += 1
            now = time.perf_counter()
            t_iter = now - t0
            record = {
                "iteration": self.iteration,
                "env_steps": self.env_steps,
                "wall_time": now - start,
                "perf/sps": self.steps_per_iteration / t_iter,
                "episode_return_mean": metrics.pop("episode_return_mean"),
                "episode_length_mean": metrics.pop("episode_length_mean"),
                "time/iteration": t_iter,
                "time/rollout": t_rollout,
                "time/learn": t_update - comm - sync,
                "time/comm": comm,
                "time/sync": sync if (strategy.profile_sync or not strategy.active) else None,
                **metrics,
            }
            if self.tel is not None:
                self.tel.log(record)
            if self.iteration % cfg.agent.save_interval == 0 or self.iteration == max_it:
                # Never checkpoint right after updates skipped for NaN/Inf: the skip decision is
                # global (one all-reduced flag), so every rank agrees to skip the save as well.
                skipped = metrics.get("train/skipped_updates", 0)
                if skipped:
                    if self.tel is not None:
                        self.tel.message(
                            f"checkpoint: not saving iteration {self.iteration}: {skipped} "
                            f"update(s) were skipped for non-finite loss or gradients"
                        )
                else:
                    self.save(record["wall_time"])
        if strategy.active:
            strategy.verify_replicas(self.policy)
        return record
