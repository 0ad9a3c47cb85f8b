"""The PPO training loop: rollout -> advantages -> update -> log -> checkpoint.

The runner is handed a strategy (``distrl.distributed.base.Strategy``) and never builds one; it
plays the roles the strategy gives this rank: a ``Collector`` (rollout, episode bookkeeping) and
a ``Learner`` (advantages, update), the ``server`` of the parameter-server strategies
(``serve``), or a learner or actor of ``learner-actor`` (``learn_from_actors``, ``act``).
Besides the gradients, one exchange per iteration agrees on everything else: the batch
statistics, the observation moments, every collector's episode window and rollout time
(``Strategy.reduce_stats``). The loop is the same for 1 and W ranks.
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
from distrl.distributed.base import Strategy
from distrl.distributed.context import rank_seed
from distrl.envs.core import VecEnv
from distrl.policy import ActorCritic, Moments
from distrl.runner.collector import (  # noqa: F401 (the errors are part of this module's API)
    WINDOW,
    Collector,
    EnvStepError,
    NonFiniteEnvError,
    RemoteRollouts,
    episode_summary,
)
from distrl.runner.hooks import HOOKS, Hooks
from distrl.runner.learner import Learner
from distrl.telemetry import Telemetry


class OnPolicyRunner:
    def __init__(
        self,
        cfg: TrainConfig,
        strategy: Strategy,
        env: VecEnv,
        telemetry: Telemetry | None = None,
        run_dir: Path | None = None,
        hooks: list[Hooks] | None = None,
    ):
        self.cfg, self.strategy, self.env = cfg, strategy, env
        self.tel = telemetry or Telemetry()  # the base class is the null object
        self.run_dir = run_dir
        self.hooks = [*HOOKS, *(hooks or [])]
        self.seed = rank_seed(cfg.seed, strategy.seed_rank)
        torch.manual_seed(self.seed)
        # Nothing here draws from numpy or `random`, but checkpoints capture their state: seeded,
        # two runs with one seed write identical checkpoints (and resumes restore them exactly).
        random.seed(self.seed)
        np.random.seed(self.seed % 2**32)
        self.policy = ActorCritic(env.obs_dim, env.action_space, cfg.policy).to(env.device)
        slots = getattr(strategy, "rollouts_per_learner", 1)  # learner-actor: actors per learner
        self.learner = Learner(self.policy, cfg.agent, env.num_envs * slots, cfg.seed)
        roles = strategy.roles
        self.collector: Collector | RemoteRollouts | None = None
        if roles.collector:
            self.collector = Collector(
                env, self.policy, cfg.agent.num_steps, strategy.rank, self.seed, cfg.agent.gamma
            )
        elif roles.learner:  # learns from rollouts that actor ranks collect
            self.collector = RemoteRollouts(env, cfg.agent.num_steps, slots, env.device)
        self.iteration = 0
        self.wall_offset = 0.0
        strategy.setup(self.policy, self.learner.ppo)

    # ---- counters ------------------------------------------------------------------------
    @property
    def ppo(self) -> PPO:
        return self.learner.ppo

    @property
    def buffer(self):
        return self.collector.buffer

    @property
    def steps_per_iteration(self) -> int:
        """Env steps of every collector together in one iteration."""
        per_rank = self.cfg.agent.num_steps * self.env.num_envs
        return per_rank * self.strategy.num_collectors

    @property
    def env_steps(self) -> int:
        return self.iteration * self.steps_per_iteration

    # ---- one iteration ----------------------------------------------------------------------
    def rollout(self) -> None:
        self.collector.rollout(self.iteration)

    # ---- one iteration's update -------------------------------------------------------------
    def learn_step(self) -> dict[str, Any]:
        """Advantages, the agreed statistics, the PPO update, then the normalizers move to this
        rollout's (global) observation and discounted-return moments."""
        for h in self.hooks:
            h.before_update(self)
        c, buf = self.collector, self.collector.buffer
        self.learner.advantages(buf, c.obs)
        rollout_time = torch.tensor([c.last_rollout_time], dtype=torch.float64)
        sums = {"batch": PPO.batch_sums(buf), "obs": c.obs_moments()}
        if self.policy.reward_norm is not None:
            sums["ret"] = c.return_moments()
        agreed = self.strategy.reduce_stats(
            sums=sums,
            gather={"rollout_time": rollout_time, "episodes": c.episode_window(self.iteration)},
        )
        metrics = self.learner.update(buf, agreed.sums["batch"], self.strategy)
        self.merge_moments(agreed.sums["obs"], agreed.sums.get("ret"))
        metrics |= episode_summary(agreed.gathered["rollout_time"], agreed.gathered["episodes"])
        for h in self.hooks:
            h.after_update(self, metrics)
        return metrics

    def merge_moments(self, obs: torch.Tensor, ret: torch.Tensor | None) -> None:
        """The normalizers take in the moments summed over every collector (count-weighted)."""
        if self.policy.normalizer.enabled:
            self.policy.normalizer.update(Moments.from_flat_sum(obs))
        if self.policy.reward_norm is not None:
            self.policy.reward_norm.update(Moments.from_flat_sum(ret))

    # ---- checkpoints -----------------------------------------------------------------------
    def save(self, wall_time: float, ranks: list[Any] | None = None) -> Path | None:
        """Rank 0 writes; ``ranks`` (per-rank state) is gathered here unless given (the
        parameter server collects it from its workers' messages)."""
        if ranks is None:
            ranks = self.strategy.gather_object(self.rank_state())
        if not self.strategy.is_main or self.run_dir is None:
            return None
        state = {
            "policy": self.policy.state_dict(),
            **self.learner.state_dict(),
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "wall_time": wall_time,
            "ranks": ranks,
        }
        meta = ckpt.run_metadata(to_dict(self.cfg), self.strategy.world_size, self.env_steps)
        keep = self.cfg.agent.keep_checkpoints
        return ckpt.save_checkpoint(
            self.run_dir / "checkpoints", self.iteration, state, meta, keep=keep
        )

    def load(self, path: Path) -> list[str]:
        """Load the checkpoint every rank was told to load; returns notes on changed fields."""
        state, manifest = ckpt.load_checkpoint(path, map_location="cpu")
        notes = ckpt.check_resume_compatible(manifest, to_dict(self.cfg), self.strategy.world_size)
        self.policy.load_state_dict(state["policy"])
        self.learner.load_state_dict(state)
        self.iteration = int(state["iteration"])
        self.wall_offset = float(state["wall_time"])
        mine = state["ranks"][self.strategy.rank] or {}  # empty: a dropped actor's slot
        if self.strategy.roles.collector and mine:
            self.collector.load_state_dict(mine)
        if self.collector is not None and "shuffle_rng" in mine:  # this rank's own shuffle
            self.learner.shuffle_gen.set_state(mine["shuffle_rng"])
        return notes

    def rank_state(self) -> dict[str, Any]:
        """What differs per rank: the collector's state and this rank's minibatch shuffle."""
        own = self.collector.state_dict() if self.strategy.roles.collector else {}
        return {**own, "shuffle_rng": self.learner.shuffle_gen.get_state()}

    # ---- the loop -------------------------------------------------------------------------
    def learn(self) -> dict[str, Any]:
        roles = self.strategy.roles
        if roles.server:
            return self.serve()
        if not roles.collector:
            return self.learn_from_actors()
        if not roles.learner:
            return self.act()
        cfg, strategy, collector = self.cfg, self.strategy, self.collector
        max_it = cfg.agent.max_iterations
        start = time.perf_counter() - self.wall_offset
        record: dict[str, Any] = {}
        strategy.take_times()
        while self.iteration < max_it:
            strategy.heartbeat(self.iteration)
            self.ppo.schedule_lr(self.iteration)
            t0 = time.perf_counter()
            collector.rollout(self.iteration)
            t_rollout = collector.last_rollout_time = time.perf_counter() - t0
            if cfg.env.check_finite:
                collector.check_finite(self.iteration)
            t1 = time.perf_counter()
            metrics = self.learn_step()
            t_update = time.perf_counter() - t1
            comm, sync = strategy.take_times()
            self.iteration += 1
            record = self._record(t0, start, metrics, t_rollout, t_update, comm, sync)
            self._log(record)
            if self.iteration % cfg.agent.save_interval == 0 or self.iteration == max_it:
                self._checkpoint(record["wall_time"], metrics.get("train/skipped_updates", 0))
        strategy.verify_replicas(self.policy)
        strategy.finish()
        return record

    # ---- learner-actor: the learner and actor roles --------------------------------------------
    def learn_from_actors(self) -> dict[str, Any]:
        """Learner: one rollout from each of its actors, the update (all-reduce among the
        learners), a checkpoint when due, then the new weights to the actors."""
        cfg, strategy, rollouts = self.cfg, self.strategy, self.collector
        max_it = cfg.agent.max_iterations
        start = time.perf_counter() - self.wall_offset
        strategy.start(self.iteration)
        strategy.take_times()
        record: dict[str, Any] = {}
        while self.iteration < max_it:
            strategy.heartbeat(self.iteration)
            self.ppo.schedule_lr(self.iteration)
            t0 = time.perf_counter()
            strategy.receive_rollouts(rollouts)
            self.learner.num_envs = rollouts.buffer.num_envs
            t_wait = time.perf_counter() - t0
            metrics = self.learn_step()
            t_update = time.perf_counter() - t0 - t_wait
            self.iteration += 1
            if self.iteration % cfg.agent.save_interval == 0 or self.iteration == max_it:
                ranks = strategy.learner_states(self.iteration, self.rank_state())
                skipped = metrics.get("train/skipped_updates", 0)
                if skipped:
                    self._checkpoint(0.0, skipped)  # says why it does not save
                elif strategy.is_main:  # the states were gathered to rank 0 among the learners
                    self.save(time.perf_counter() - start, ranks)
            strategy.push_weights()
            comm, _ = strategy.take_times()
            extra = strategy.take_metrics()
            for text in extra.pop("messages", []):
                self.tel.message(text)
            t_rollout = metrics.get("time/rollout_max")
            record = self._record(t0, start, metrics, t_rollout, t_update, comm, 0.0) | extra
            self._log(record)
        strategy.verify_replicas(self.policy)
        strategy.finish()
        return record

    def act(self) -> dict[str, Any]:
        """Actor: wait for new enough weights, collect, send the rollout (and, when a checkpoint
        is due, this rank's state) to its learner."""
        cfg, strategy, collector = self.cfg, self.strategy, self.collector
        max_it = cfg.agent.max_iterations
        strategy.start(self.iteration)
        record: dict[str, Any] = {}
        while self.iteration < max_it:
            strategy.heartbeat(self.iteration)
            t0 = time.perf_counter()
            strategy.await_weights(self.iteration - strategy.lag_bound)
            t1 = time.perf_counter()
            collector.rollout(self.iteration)
            if cfg.env.check_finite:
                collector.check_finite(self.iteration)
            collector.episode_window(self.iteration)
            t_rollout = time.perf_counter() - t1
            strategy.send_rollout(collector, self.iteration, t_rollout)
            self.iteration += 1
            if self.iteration % cfg.agent.save_interval == 0 or self.iteration == max_it:
                strategy.send_state(self.iteration, self.rank_state())
            record = {
                "iteration": self.iteration,
                "dist/version": strategy.version,
                "time/weight_wait": t1 - t0,
                "time/rollout": t_rollout,
            }
            self._log(record)  # non-main ranks log nothing; hooks see every rank
        strategy.finish()  # the final weights arrive here
        return record | {"dist/version": strategy.version}

    # ---- the server role (parameter-server strategies) ---------------------------------------
    def serve(self) -> dict[str, Any]:
        """Apply what the workers send until they finish; one record per iteration that every
        live worker completed; checkpoints when every live worker's state has arrived."""
        start = time.perf_counter() - self.wall_offset
        seen: dict[str, Any] = {"times": {}, "windows": {}, "ev": None}
        per_worker = self.cfg.agent.num_steps * self.env.num_envs
        last_steps = self.iteration * self.steps_per_iteration

        def on_stats(sums: torch.Tensor, gathered: dict[int, torch.Tensor], nsums: int) -> None:
            # the layout learn_step packs: sums = [batch power sums (7) | obs moments (1 + 2D)
            # | return moments (3, with reward scaling)], gathered row = [rollout time | window]
            seen["ev"] = PPO.batch_stats(sums[:7])["explained_variance"]
            obs_end = 8 + 2 * self.env.obs_dim
            self.merge_moments(sums[7:obs_end], sums[obs_end:])
            for w, row in gathered.items():
                seen["times"][w] = row[:1]
                seen["windows"][w] = row[1:].view(WINDOW, 3)

        record: dict[str, Any] = {}
        for event in self.strategy.serve(on_stats, self.iteration):
            if event.kind == "checkpoint":
                ranks = [event.states.get(r, {}) for r in range(self.strategy.world_size)]
                self.iteration = max(self.iteration, event.iteration)
                self.save(time.perf_counter() - start, ranks)
                continue
            m = event.metrics
            for text in m.pop("messages", []):
                self.tel.message(text)
            self.iteration = event.iteration
            self.ppo.schedule_lr(self.iteration)
            steps = sum(m.pop("worker_iterations").values()) * per_worker
            times = list(seen["times"].values()) or [torch.zeros(1, dtype=torch.float64)]
            windows = list(seen["windows"].values()) or [torch.full((WINDOW, 3), -1.0)]
            episodes = episode_summary(torch.stack(times), torch.stack(windows))
            t_iter = m.pop("time/iteration")
            record = {
                "iteration": self.iteration,
                "env_steps": steps,
                "wall_time": time.perf_counter() - start,
                "perf/sps": (steps - last_steps) / max(t_iter, 1e-9),
                "episode_return_mean": episodes["episode_return_mean"],
                "episode_length_mean": episodes["episode_length_mean"],
                "time/iteration": t_iter,
                "time/rollout": episodes["time/rollout_max"],
                "time/rollout_max": episodes["time/rollout_max"],
                "time/learn": t_iter - m["dist/server_wait"],
                "time/comm": m["dist/server_wait"],
                "time/sync": None,
                "explained_variance": seen["ev"],
                **m,
            }
            last_steps = steps
            self._log(record)
        return record

    def _record(
        self,
        t0: float,
        start: float,
        metrics: dict[str, Any],
        t_rollout: float | None,
        t_update: float,
        comm: float,
        sync: float,
    ) -> dict[str, Any]:
        """One iteration's metrics.jsonl record (``metrics``: what ``learn_step`` returned)."""
        now = time.perf_counter()
        t_iter = now - t0
        return {
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
            "time/sync": sync if self.strategy.measures_sync else None,
            **metrics,
        }

    def _log(self, record: dict[str, Any]) -> None:
        self.tel.log(record)
        for h in self.hooks:
            h.after_iteration(self, record)

    def _checkpoint(self, wall_time: float, skipped: int) -> None:
        """Every rank calls this at a save point; rank 0 writes."""
        # Never checkpoint right after updates skipped for NaN/Inf: the skip decision is global
        # (one combined flag), so every rank agrees to skip the save as well.
        if skipped:
            self.tel.message(
                f"checkpoint: not saving iteration {self.iteration}: {skipped} "
                f"update(s) were skipped for non-finite loss or gradients"
            )
        else:
            self.save(wall_time)
        self.strategy.take_times()  # the checkpoint's gather is not the next iteration's time
