"""On-policy PPO with GAE over fixed-length rollouts: the algorithm plug-in of
``runner.base.Runner`` for every task without an episodic suite.

One iteration of a rank that collects and learns (``Runner.iterate``): a rollout (the
``Collector`` role), NaN/Inf check, hooks, GAE, one exchange that agrees on everything besides
the gradients (the batch statistics, the env steps, the observation and return moments, every
collector's episode window and rollout time: ``Strategy.reduce_stats`` through
``stats_layout``), the PPO update with the strategy combining each minibatch (the ``Learner``
role), then ``absorb``: the normalizers, the env-step count, the episode windows. The loop is
the same for 1 and W ranks; the other roles (a parameter server, learner-actor's learners and
actors: ``runner/roles.py``) are built from the same steps.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from distrl.algorithms.ppo import PPO
from distrl.config import TrainConfig
from distrl.distributed.base import Agreed, StatsLayout, Strategy
from distrl.distributed.preemption import Preemption, granularity
from distrl.distributed.strategies import STRATEGIES
from distrl.envs.core import VecEnv
from distrl.policy import ActorCritic, Moments
from distrl.runner.base import Runner
from distrl.runner.collector import (  # noqa: F401 (the errors are part of this module's API)
    Collector,
    EnvStepError,
    NonFiniteEnvError,
    RemoteRollouts,
    RolloutSource,
    episode_summary,
)
from distrl.runner.hooks import Hooks
from distrl.runner.learner import Learner, restore_generator
from distrl.storage.rollout import WINDOW, RolloutBuffer
from distrl.telemetry import Telemetry


class OnPolicyRunner(Runner):
    def __init__(
        self,
        cfg: TrainConfig,
        strategy: Strategy,
        env: VecEnv,
        telemetry: Telemetry | None = None,
        run_dir: Any = None,
        hooks: list[Hooks] | None = None,
    ):
        super().__init__(cfg, strategy, telemetry, run_dir, hooks)
        self.env = env
        self.policy = ActorCritic.for_env(env, cfg.policy)
        role = strategy.role
        slots = role.remote_rollouts or 1
        d = cfg.dist  # async actors' rollouts may come from older weights: V-trace
        off_policy = STRATEGIES[d.strategy].off_policy(d)
        off_policy = off_policy and d.correction == "vtrace"
        self.learner = Learner(
            self.policy, cfg.agent, env.num_envs * slots, cfg.seed, off_policy=off_policy
        )
        self.ppo = self.learner.ppo
        self.collector: Collector | None = None  # this rank's own envs
        self.remote: RemoteRollouts | None = None  # or the rollouts other ranks collect
        if role.collector:
            self.collector = Collector(
                env, self.policy, cfg.agent.num_steps, strategy.rank, self.seed, cfg.agent.gamma
            )
            self.collector.preempt = preemption(cfg, strategy, env.num_envs)
        elif role.learner:
            self.remote = RemoteRollouts(env, self.policy, cfg.agent.num_steps, slots, env.device)
        self._env_steps = 0  # every collector's, from the agreed statistics (absorb)
        # what absorb keeps for summary: each collector's rollout time and episode window (by
        # rank), the batch's explained variance, and whether the windows are every collector's
        self._seen: dict[str, Any] = {"times": {}, "windows": {}, "ev": None, "whole": False}
        strategy.env_rows = env.num_envs  # (the strategy's messages are sized for them)
        strategy.setup(self.policy, self.ppo)

    # ---- counters ------------------------------------------------------------------------
    @property
    def rollouts(self) -> RolloutSource:
        """What the learner role trains on: this rank's rollout, or its actors'."""
        source = self.collector or self.remote
        if source is None:
            raise RuntimeError(f"rank {self.strategy.rank} neither collects nor learns")
        return source

    @property
    def buffer(self) -> RolloutBuffer:
        return self.rollouts.buffer

    def own_collector(self) -> Collector:
        if self.collector is None:
            raise RuntimeError(f"rank {self.strategy.rank} does not collect")
        return self.collector

    @property
    def steps_per_iteration(self) -> int:
        """Env steps of every collector together in one iteration."""
        per_rank = self.cfg.agent.num_steps * self.env.num_envs
        return per_rank * self.strategy.num_collectors

    @property
    def env_steps(self) -> int:
        return self._env_steps

    # ---- one iteration ----------------------------------------------------------------------
    def rollout(self) -> None:
        self.own_collector().rollout(self.iteration)

    def collect(self) -> None:
        c = self.own_collector()
        t0 = time.perf_counter()
        c.rollout(self.iteration)
        c.last_rollout_time = time.perf_counter() - t0  # every collector's is agreed
        if self.cfg.env.check_finite:
            c.check_finite(self.iteration)

    @property
    def stats_layout(self) -> StatsLayout:
        sums: dict[str, tuple[int, ...]] = {"batch": (7,), "env_steps": (1,)}
        if self.policy.normalizer.enabled:  # Moments.to_flat: count, sum, sum of squares
            sums["obs"] = (1 + 2 * self.env.obs_dim,)
        if self.policy.reward_norm is not None:
            sums["ret"] = (3,)
        if self.policy.popart is not None:
            sums["popart"] = (3 * self.policy.popart.num_tasks,)
        gather = {"rollout_time": (1,), "episodes": (WINDOW, 3)}
        return StatsLayout(tuple(sums.items()), tuple(gather.items()))

    def learn_step(self) -> dict[str, Any]:
        """Advantages, the agreed statistics, the PPO update, then the normalizers move to this
        rollout's (global) observation and discounted-return moments."""
        for h in self.hooks:
            h.before_update(self)
        c = self.rollouts
        buf = c.collected  # (its first steps, where DD-PPO's preemption cut the rollout short)
        self.learner.num_envs = buf.num_envs  # a learner's live actors' rollouts side by side
        self.learner.num_steps = buf.num_steps
        self.learner.advantages(buf, c.obs, c.memory)
        popart = self.policy.popart
        if popart is not None:  # each task's advantages in its own units (previous statistics)
            buf.advantages = popart.scale_advantages(buf.advantages, buf.obs)
        rollout_time = torch.tensor([c.last_rollout_time], dtype=torch.float64)
        steps = torch.tensor([buf.num_steps * buf.num_envs], dtype=torch.float64)
        sums = {"batch": PPO.batch_sums(buf), "env_steps": steps}
        if self.policy.normalizer.enabled:
            sums["obs"] = c.obs_moments()
        if self.policy.reward_norm is not None:  # (learner-actor: the actors' moments, summed)
            sums["ret"] = c.return_moments()
        if popart is not None:  # the value targets' moments per task
            sums["popart"] = popart.moments(buf.returns, buf.obs)
        agreed = self.strategy.reduce_stats(
            sums=sums,
            gather={"rollout_time": rollout_time, "episodes": c.episode_window(self.iteration)},
        )
        if popart is not None:  # before the update: it trains on targets normalized by these
            popart.update(agreed.sums["popart"], self.policy.value_head())
        metrics = self.learner.update(buf, agreed.sums["batch"], self.strategy)
        if self.collector is not None and self.collector.preempt is not None:
            lost = self.steps_per_iteration - int(agreed.sums["env_steps"].sum())
            metrics["dist/preempted_steps"] = lost  # env steps, every rank's together
        self.absorb(agreed)
        metrics |= self.summary()
        for h in self.hooks:
            h.after_update(self, metrics)
        return metrics

    def absorb(self, agreed: Agreed) -> None:
        """The normalizers take in the moments summed over every collector (count-weighted);
        the env steps add up; each collector's rollout time and episode window are kept (by
        rank) for ``summary``, and the batch's explained variance."""
        sums, seen = agreed.sums, self._seen
        if self.policy.normalizer.enabled:
            self.policy.normalizer.update(Moments.from_flat_sum(sums["obs"]))
        if self.policy.reward_norm is not None and "ret" in sums:
            self.policy.reward_norm.update(Moments.from_flat_sum(sums["ret"]))
        self._env_steps += int(sums["env_steps"].sum())
        seen["ev"] = PPO.batch_stats(sums["batch"])["explained_variance"]
        times, windows = agreed.gathered["rollout_time"], agreed.gathered["episodes"]
        for i, r in enumerate(agreed.ranks or range(times.shape[0])):
            seen["times"][r], seen["windows"][r] = times[i], windows[i]
        # the rows of every collector that counts now (a rank that left, a dropped worker, no
        # longer does); a parameter server's worker holds only its own, so it waits for the
        # server's word on an early stop
        if agreed.collectors is not None:
            gone = set(seen["times"]) - set(agreed.collectors)
            for r in gone:
                del seen["times"][r], seen["windows"][r]
        seen["whole"] = agreed.collectors is not None

    def summary(self) -> dict[str, Any]:
        """Episode return and length over the newest episodes of every collector's window, the
        slowest rollout, the explained variance."""
        seen = self._seen
        ranks = sorted(seen["times"])
        times = [seen["times"][r] for r in ranks] or [torch.zeros(1, dtype=torch.float64)]
        windows = [seen["windows"][r] for r in ranks] or [torch.full((WINDOW, 3), -1.0)]
        episodes = episode_summary(torch.stack(times), torch.stack(windows))
        return episodes | {"explained_variance": seen["ev"]}

    # ---- --agent.target-return ---------------------------------------------------------------
    def _return_mean(self) -> float | None:
        """The logged ``episode_return_mean``: over the newest episodes of every collector."""
        return self.summary()["episode_return_mean"]

    def reached_early_stop(self) -> bool:
        """``--agent.target-return``: the mean return over every collector's newest episodes
        reached it. Decided from the same numbers on every rank that sees every collector's
        episodes: the ranks of an all-gather (allreduce; learner-actor's learners, whose
        weights then tell their actors), a parameter server (whose reply then stops its
        workers); a worker of a parameter server sees its own alone and waits for that reply."""
        target = self.cfg.agent.target_return
        if target is None or not self._seen["whole"]:
            return False
        mean = self._return_mean()
        return mean is not None and mean >= target

    @property
    def early_stop_reason(self) -> str:
        return (
            f"target return {self.cfg.agent.target_return:g} reached (episode_return_mean "
            f"{self._return_mean():.2f}, every rank's newest episodes)"
        )

    # ---- checkpoints -----------------------------------------------------------------------
    def algorithm_state(self) -> dict[str, Any]:
        return self.learner.state_dict()

    def load_algorithm_state(self, state: dict[str, Any]) -> None:
        self.learner.load_state_dict(state)
        self._env_steps = int(state["env_steps"])

    def rank_state(self) -> dict[str, Any]:
        """What differs per rank: the collector's state and this rank's minibatch shuffle."""
        own = self.collector.state_dict() if self.collector is not None else {}
        return {**own, "shuffle_rng": self.learner.shuffle_gen.get_state()}

    def load_rank_state(self, mine: dict[str, Any]) -> None:
        if self.collector is not None and mine:
            self.collector.load_state_dict(mine)
        has_rollouts = self.collector is not None or self.remote is not None
        if has_rollouts and "shuffle_rng" in mine:  # this rank's own shuffle
            restore_generator(self.learner.shuffle_gen, mine["shuffle_rng"], "minibatch shuffle")

    def close(self) -> None:
        self.env.close()


def preemption(cfg: TrainConfig, strategy: Strategy, num_envs: int) -> Preemption | None:
    """DD-PPO's preemption of a collecting rank (``--dist.preempt-fraction``), or None: off, or
    one process (``check_compatible`` refuses it under other strategies and algorithms)."""
    fraction = cfg.dist.preempt_fraction
    if fraction >= 1.0 or not strategy.active:
        return None
    a = cfg.agent
    step = granularity(num_envs, a.num_minibatches)
    return Preemption(fraction, strategy.world_size, strategy.rank, a.num_steps, step)
