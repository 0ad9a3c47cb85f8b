"""The multi-task episodic loop of seed 004 (RIPT, Tan et al. 2025, "Interactive Post-Training
for Vision-Language-Action Models"): per iteration each rank trains one task of its shard on
exactly ``data_batch_size`` episodes with RLOO advantages and PPO-clip epochs.

One iteration of one rank:

    task, init = schedule.next(data_batch_size // K)      # this rank's shard, cursors
    batch = collect_episodes(envs[task], policy, init, K)  # exactly data_batch_size episodes
    adv = rloo_advantages(success, lengths, T, K, drop_uniform)
    agreed = strategy.reduce_stats(...)                    # every rank's counts: one collective
    w = gradient_weights(T, W, iteration, kept episodes of every rank)
    PPO-clip epochs on the kept steps, loss x w.loss_scale(rank), each minibatch through
    strategy.step(ppo, flat)                               # one all-reduce per minibatch

The runner is handed a strategy and never builds one. Every rank computes every rank's task
and the weights from (tasks, ranks, iteration) and the gathered counts, so they agree without a
counter file; the early-stop streak is computed from the same gathered numbers, so every rank
stops at the same iteration. A rank whose groups were all dropped still takes part in every
minibatch's all-reduce with a zero gradient; an iteration where no rank kept anything takes no
optimizer step anywhere (Adam would otherwise move on its momentum).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from distrl import checkpoint as ckpt
from distrl.algorithms.ppo import PPO
from distrl.algorithms.rloo import EpisodeAdvantages, rloo_advantages, rloo_policy_loss
from distrl.config import TrainConfig
from distrl.distributed.base import StatsLayout, Strategy
from distrl.distributed.sharding import TaskSchedule, gradient_weights, task_shard
from distrl.envs.episodic import EpisodicSuite, EpisodicVecEnv
from distrl.policy import ActorCritic, Moments
from distrl.runner.base import Runner
from distrl.runner.hooks import Hooks
from distrl.storage.episodes import EpisodeBatch, collect_episodes
from distrl.telemetry import Telemetry

# One float64 row per rank, all-gathered once per iteration (``Strategy.reduce_stats``).
ROW = ("task", "episodes", "successes", "return_sum", "kept", "dropped_groups", "env_steps")


class EpisodicRunner(Runner):
    def __init__(
        self,
        cfg: TrainConfig,
        strategy: Strategy,
        suite: EpisodicSuite,
        device: torch.device | str = "cpu",
        telemetry: Telemetry | None = None,
        run_dir: Path | None = None,
        hooks: list[Hooks] | None = None,
    ):
        super().__init__(cfg, strategy, telemetry, run_dir, hooks)
        self.mt = cfg.multitask
        self.task_names = suite.select(self.mt.tasks)
        T, W = len(self.task_names), strategy.world_size
        shard = task_shard(strategy.rank, T, W)
        dev, n, limit = torch.device(device), cfg.env.num_envs, cfg.env.max_episode_steps
        # Only this rank's tasks are built; task ids are positions in ``task_names``.
        self.envs: dict[int, EpisodicVecEnv] = {
            t: suite.make_task_env(self.task_names[t], n, dev, limit) for t in shard
        }
        env = self.envs[shard[0]]
        self.schedule = TaskSchedule(shard, {t: e.num_init_states for t, e in self.envs.items()})
        self.policy = ActorCritic(env.obs_dim, env.action_space, cfg.policy).to(dev)
        self.ppo = PPO(self.policy, cfg.agent)
        # Rank-local: each rank shuffles its own (differently sized) set of kept steps.
        self.shuffle_gen = torch.Generator().manual_seed(self.seed)
        self._env_steps = 0
        self.streak = 0  # iterations in a row at or above early_stop_success
        self.task_success = torch.full((T,), math.nan, dtype=torch.float64)  # latest, global
        self.task: int | None = None  # the current iteration's task and episodes (hooks read them)
        self.batch: EpisodeBatch | None = None
        strategy.setup(self.policy, self.ppo)

    # ---- one iteration ----------------------------------------------------------------------
    def collect(self) -> None:
        """This iteration's task and exactly ``data_batch_size`` episodes of it."""
        task, init = self.schedule.next(self.mt.init_states_per_iteration)
        # The env's own randomness is a function of (seed, iteration): nothing to checkpoint.
        env_seed = self.seed * 1_000_003 + self.iteration

        def act(obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            actions, logp, _ = self.policy.act(obs)
            return actions, logp

        self.task = task
        self.batch = collect_episodes(self.envs[task], act, init, self.mt.group_size, env_seed)

    @property
    def env_steps(self) -> int:
        return self._env_steps

    @property
    def stats_layout(self) -> StatsLayout:
        obs = 1 + 2 * self.policy.normalizer.mean.numel()  # Moments.to_flat
        return StatsLayout((("obs", (obs,)),), (("rank", (len(ROW),)),))

    def learn_step(self) -> dict[str, Any]:
        """RLOO advantages, the agreed counts, the weighted PPO-clip epochs, the normalizer."""
        assert self.task is not None and self.batch is not None, "collect() first"
        task, batch = self.task, self.batch
        for h in self.hooks:
            h.before_update(self)
        mt = self.mt
        success = batch.success.to(torch.float32)
        adv = rloo_advantages(
            success, batch.lengths, batch.max_steps, mt.group_size, mt.drop_uniform
        )
        kept = int(adv.kept.sum())
        row = torch.tensor(
            [
                task,
                batch.num_episodes,
                float(success.sum()),
                float(batch.returns.sum()),
                kept,
                adv.num_dropped_groups,
                batch.env_steps,
            ],
            dtype=torch.float64,
        )
        valid = batch.obs[batch.mask]
        agreed = self.strategy.reduce_stats(
            sums={"obs": Moments.of(valid).to_flat()}, gather={"rank": row}
        )
        rows = agreed.gathered["rank"]
        kept_per_rank = [int(k) for k in rows[:, ROW.index("kept")].tolist()]
        w = gradient_weights(
            len(self.task_names),
            self.strategy.world_size,
            self.iteration,
            kept_per_rank,
            mt.balance,
        )
        metrics = self.update(batch, adv, w.loss_scale(self.strategy.rank), sum(kept_per_rank))
        if self.policy.normalizer.enabled:  # count-weighted merge across ranks
            self.policy.normalizer.update(Moments.from_flat_sum(agreed.sums["obs"]))
        metrics |= self.task_metrics(rows, w.task_shares)
        for h in self.hooks:
            h.after_update(self, metrics)
        return metrics

    def update(
        self, batch: EpisodeBatch, adv: EpisodeAdvantages, scale: float, kept_total: int
    ) -> dict[str, Any]:
        """PPO-clip epochs on this rank's kept steps, the loss scaled by this rank's gradient
        weight; ``num_minibatches`` per epoch on every rank (some may be empty), so the
        per-minibatch all-reduces line up."""
        if kept_total == 0:  # every rank dropped every group: agreed, so all skip together
            return {"train/updates": 0}
        a = self.cfg.agent
        mask = adv.mask
        obs, actions = batch.obs[mask], batch.actions[mask]
        old_logp, advantages = batch.logprobs[mask], adv.advantages[mask]
        steps = obs.shape[0]
        zero = obs.new_zeros(())

        def shuffle() -> list[torch.Tensor]:
            perm = torch.randperm(steps, generator=self.shuffle_gen)
            return list(perm.tensor_split(a.num_minibatches))

        def gradient(idx: torch.Tensor) -> torch.Tensor:
            new_logp, entropy, _ = self.policy.evaluate(obs[idx], actions[idx])
            every = torch.ones_like(new_logp, dtype=torch.bool)
            loss, parts = rloo_policy_loss(
                new_logp, old_logp[idx], advantages[idx], every, a.clip_coef, entropy, a.ent_coef
            )
            return self.ppo.backward(loss * scale, parts | {"v_loss": zero})

        out = self.ppo.epochs(shuffle, gradient, self.strategy)
        del out["loss/value"]  # no critic
        return out

    def task_metrics(self, rows: torch.Tensor, shares: dict[int, float]) -> dict[str, Any]:
        """Per task trained this iteration (its ranks together): success, return, episodes,
        gradient share; overall success; the suite's success and the early-stop streak."""
        col = {name: rows[:, i] for i, name in enumerate(ROW)}
        out: dict[str, Any] = {}
        for t in sorted({int(x) for x in col["task"].tolist()}):
            on = col["task"] == t
            n = float(col["episodes"][on].sum())
            name = self.task_names[t]
            self.task_success[t] = float(col["successes"][on].sum()) / n
            out[f"task/{name}/success"] = float(self.task_success[t])
            out[f"task/{name}/return"] = float(col["return_sum"][on].sum()) / n
            out[f"task/{name}/episodes"] = int(n)
            out[f"task/{name}/grad_share"] = shares.get(t, 0.0)
        episodes = float(col["episodes"].sum())
        seen = ~torch.isnan(self.task_success)
        suite = float(self.task_success.mean()) if bool(seen.all()) else None
        target = self.mt.early_stop_success
        self.streak = (
            self.streak + 1 if target is not None and suite is not None and suite >= target else 0
        )
        self._env_steps += int(col["env_steps"].sum())
        return {
            "success": float(col["successes"].sum()) / episodes,
            "success/suite": suite,
            "episode_return_mean": float(col["return_sum"].sum()) / episodes,
            "episodes": int(episodes),
            "rloo/dropped_groups": int(col["dropped_groups"].sum()),
            "rloo/kept_episodes": int(col["kept"].sum()),
            "early_stop/streak": self.streak,
            **out,
        }

    @property
    def stop_early(self) -> bool:
        """Agreed on every rank: the streak is computed from all-gathered numbers."""
        return self.streak >= self.mt.early_stop_patience

    # ---- checkpoints -----------------------------------------------------------------------
    def rank_state(self) -> dict[str, Any]:
        """What differs per rank: the schedule's cursors, RNG and the shuffle generator."""
        return {
            "schedule": self.schedule.state_dict(),
            "rng": ckpt.capture_rng_state(),
            "shuffle_rng": self.shuffle_gen.get_state(),
        }

    def load_rank_state(self, mine: dict[str, Any]) -> None:
        self.schedule.load_state_dict(mine["schedule"])
        ckpt.restore_rng_state(mine["rng"])
        self.shuffle_gen.set_state(mine["shuffle_rng"])

    def algorithm_state(self) -> dict[str, Any]:
        return {
            "ppo": self.ppo.state_dict(),
            "streak": self.streak,
            "task_success": self.task_success.clone(),
        }

    def load_algorithm_state(self, state: dict[str, Any]) -> None:
        self.ppo.load_state_dict(state["ppo"])
        self._env_steps = int(state["env_steps"])
        self.streak = int(state["streak"])
        self.task_success = state["task_success"].clone()

    def finished(self) -> None:
        if self.stop_early:
            self.tel.message(
                f"early stop: suite success >= {self.mt.early_stop_success} for "
                f"{self.streak} iterations (iteration {self.iteration})"
            )

    def close(self) -> None:
        for env in self.envs.values():
            env.close()
