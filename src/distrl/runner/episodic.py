"""Multi-task episodic RLOO, as RIPT does it (Tan et al. 2025, "Interactive Post-Training
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

from distrl import seeding
from distrl.algorithms.bc import bc_loss
from distrl.algorithms.ppo import PPO
from distrl.algorithms.rloo import (
    EpisodeAdvantages,
    rloo_advantages,
    rloo_policy_loss,
    uniform_groups,
)
from distrl.algorithms.task_schedule import (
    GradientWeights,
    TaskSchedule,
    gradient_weights,
    task_shard,
)
from distrl.config import TrainConfig
from distrl.distributed.base import Agreed, StatsLayout, Strategy
from distrl.envs.episodic import EpisodicSuite, EpisodicVecEnv
from distrl.policy import ActorCritic, Moments
from distrl.policy.distributions import powerlaw_noise
from distrl.runner.base import Runner
from distrl.runner.collector import NonFiniteEnvError
from distrl.runner.hooks import Hooks
from distrl.storage.episodes import EpisodeBatch, collect_episodes, group_rows, replace_groups
from distrl.telemetry import Telemetry


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
        T, C = len(self.task_names), strategy.num_collectors
        dev, n = torch.device(device), cfg.env.num_envs
        # Tasks are sharded over the collecting ranks; only this rank's are built (a parameter
        # server builds one env of one row, for the spaces). Task ids index ``task_names``.
        shard = task_shard(strategy.collector_index, T, C) if strategy.role.collector else []
        self.envs: dict[int, EpisodicVecEnv] = {
            t: suite.make_training_env(self.task_names[t], n, dev, cfg.env) for t in shard
        }
        env = self.envs[shard[0]] if shard else suite.make_task_env(self.task_names[0], 1, dev, 1)
        states = {t: e.num_init_states for t, e in self.envs.items()}
        smart = self.mt.smart_init_states > 0
        self.schedule = TaskSchedule(shard, states, smart) if shard else None  # None: a server
        self.policy = ActorCritic.for_env(env, cfg.policy)
        if self.policy.categorical and self.mt.noise_beta > 0:
            raise ValueError(
                f"--multitask.noise-beta {self.mt.noise_beta} colours a Gaussian policy's noise; "
                f"{cfg.task}'s actions are discrete: leave it at 0"
            )
        if not shard:
            env.close()
        self.ppo = PPO(self.policy, cfg.agent)
        # Rank-local: each rank shuffles its own (differently sized) set of kept steps.
        self.shuffle_gen = torch.Generator().manual_seed(self.seed)
        self._env_steps = 0
        self.streak = 0  # iterations in a row at or above early_stop_success
        self.task_success = torch.full((T,), math.nan, dtype=torch.float64)  # latest, global
        self.task: int | None = None  # the current iteration's task and episodes (hooks read them)
        self.batch: EpisodeBatch | None = None
        self.replaced = torch.zeros(4, dtype=torch.float64)  # a refill's: see ``_refill``
        self._served: dict[str, torch.Tensor] | None = None  # absorbed, not yet summarized
        self.demo_obs, self.demo_actions = self._demo_steps(dev)
        # --multitask.self-imitation: this rank's newest successful steps per task (obs, actions)
        self.own: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        strategy.setup(self.policy, self.ppo)

    def _demo_steps(self, dev: torch.device) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """The successful demonstration steps of the trained tasks (--multitask.demos), every
        rank all of them: the behaviour-cloning term anchors every task, not only its shard."""
        if self.mt.demos is None:
            return None, None
        from distrl.demos import demo_steps, load_demos

        demos = load_demos(self.mt.demos)
        tasks = tuple(t for t in self.task_names if t in demos["tasks"])
        if not tasks:
            raise ValueError(f"--multitask.demos {self.mt.demos} holds none of the trained tasks")
        obs, actions, _ = demo_steps(demos, tasks)
        return obs.to(dev), actions.to(dev)

    # ---- one iteration ----------------------------------------------------------------------
    def collect(self) -> None:
        """This iteration's task and exactly ``data_batch_size`` episodes of it."""
        assert self.schedule is not None, "a rank that collects has a schedule"
        mt, solved = self.mt, None
        if mt.skip_solved is not None:  # the agreed latest successes: every rank sees the same
            threshold = mt.skip_solved

            def solved(t: int) -> bool:
                return bool(self.task_success[t] >= threshold)  # NaN (never seen): no

        task, init = self.schedule.next(mt.init_states_per_iteration, solved, mt.solved_revisit)
        # The env's own randomness is a function of (seed, iteration): nothing to checkpoint.
        env_seed = self.seed * 1_000_003 + self.iteration

        def act(
            obs: torch.Tensor, eps: torch.Tensor | None = None
        ) -> tuple[torch.Tensor, torch.Tensor]:
            actions, logp, _ = self.policy.act(obs, eps)
            return actions, logp

        env = self.envs[task]
        self.task = task
        self.batch = collect_episodes(
            env, act, init, self.mt.group_size, env_seed, self._noise(env, len(init), env_seed)
        )
        self.replaced = torch.zeros(4, dtype=torch.float64)  # groups, episodes, wins, return
        if mt.drop_uniform and mt.refill_rounds:
            self._refill(task, act, env_seed)
        if mt.smart_init_states:  # the states whose group came out all equal sit out a while
            self._rest(task, self.batch.init_indices[self._uniform() * mt.group_size])
        if self.cfg.env.check_finite:
            self.check_finite(task, self.batch)

    def _uniform(self) -> torch.Tensor:
        """The groups of this iteration's batch whose K successes are all equal (indices)."""
        assert self.batch is not None
        success = self.batch.success.to(torch.float32)
        return uniform_groups(success, self.mt.group_size).nonzero().squeeze(1)

    def _rest(self, task: int, states: torch.Tensor) -> None:
        """--multitask.smart-init-states: ``states`` sit out ``task``'s next visits."""
        if self.mt.smart_init_states and states.numel():
            assert self.schedule is not None
            cursor = self.schedule.init_states[task]
            cursor.rest(states.tolist(), self.mt.smart_init_states)

    def _noise(self, env: EpisodicVecEnv, groups: int, seed: int) -> torch.Tensor | None:
        """Each episode's exploration draws (--multitask.noise-beta), a function of ``seed``."""
        if self.mt.noise_beta <= 0:
            return None
        gen = torch.Generator().manual_seed(seed)
        shape = (groups * self.mt.group_size, self.policy.action_space.dim)
        return powerlaw_noise(shape, env.max_episode_steps, self.mt.noise_beta, gen)

    def _refill(self, task: int, act: Any, env_seed: int) -> None:
        """--multitask.refill-rounds: the groups whose K outcomes were all equal make way for
        groups of the task's next init states, collected anew (RIPT's refill), until none is
        uniform or the rounds run out. The replaced episodes still count in the task's
        success and return (``self.replaced``), so the rates are not raised by the refill."""
        assert self.batch is not None and self.schedule is not None
        batch, K, env = self.batch, self.mt.group_size, self.envs[task]
        for r in range(1, self.mt.refill_rounds + 1):
            groups = self._uniform()
            if groups.numel() == 0:
                return
            rows = group_rows(groups, K)
            self.replaced += torch.tensor(
                [len(groups), len(rows), float(batch.success[rows].sum()),
                 float(batch.returns[rows].sum())], dtype=torch.float64,
            )  # fmt: skip
            self._rest(task, batch.init_indices[groups * K])
            init = self.schedule.init_states[task].take(len(groups))
            seed = (env_seed * 1_000_003 + r) % 2**62  # each round's own, from (seed, iteration)
            new = collect_episodes(env, act, init, K, seed, self._noise(env, len(init), seed))
            replace_groups(batch, groups, new)

    def check_finite(self, task: int, batch: EpisodeBatch) -> None:
        """NaN/Inf from the env stops training here, before the update or the normalizer sees
        it, naming rank, task, episode (env row), its init state and the step."""
        for field, x in (("observation", batch.obs), ("reward", batch.rewards)):
            bad = ~torch.isfinite(x)
            while bad.dim() > 2:
                bad = bad.any(-1)
            bad &= batch.mask  # padding past an episode's end is not the env's
            if bool(bad.any()):
                e, t = (int(v) for v in bad.nonzero()[0])
                # obs[t] came from the reset (t = 0) or from step t - 1
                when = (
                    "from its reset"
                    if field == "observation" and t == 0
                    else (f"at episode step {t - 1 if field == 'observation' else t}")
                )
                raise NonFiniteEnvError(
                    f"rank {self.strategy.rank}: task {self.task_names[task]}: env {e} "
                    f"(episode {e}, init state {int(batch.init_indices[e])}) returned a "
                    f"non-finite {field} {when} (iteration {self.iteration}); the update was "
                    f"not run"
                )

    @property
    def env_steps(self) -> int:
        return self._env_steps

    @property
    def stats_layout(self) -> StatsLayout:
        """Every count summed over the collecting ranks in one exchange: per task (episodes,
        successes, return sum), per collector (kept episodes), and totals. All are additive,
        so a parameter server may also add up several iterations of them."""
        T, C = len(self.task_names), self.strategy.num_collectors
        obs = 1 + 2 * self.policy.normalizer.mean.numel()  # Moments.to_flat
        fields = {
            "obs": (obs,),
            "episodes": (T,),
            "successes": (T,),
            "returns": (T,),
            "kept": (C,),
            "dropped_groups": (1,),
            "refilled_groups": (1,),
            "env_steps": (1,),
        }
        if self.mt.skip_solved is not None:  # which task each collector trained (id + 1)
            fields["task_of"] = (C,)
        return StatsLayout(tuple(fields.items()))

    def learn_step(self) -> dict[str, Any]:
        """RLOO advantages, the agreed counts, the weighted PPO-clip epochs, the normalizer."""
        assert self.task is not None and self.batch is not None, "collect() first"
        task, batch = self.task, self.batch
        for h in self.hooks:
            h.before_update(self)
        mt, strategy, me = self.mt, self.strategy, self.strategy.collector_index
        success = batch.success.to(torch.float32)
        adv = rloo_advantages(
            success,
            batch.lengths,
            batch.max_steps,
            mt.group_size,
            mt.drop_uniform,
            equal_episodes=mt.episode_weight == "equal",
        )
        kept = int(adv.kept.sum())
        T, C, f64 = len(self.task_names), strategy.num_collectors, torch.float64
        mine = {name: torch.zeros(n, dtype=f64) for name, n in (("episodes", T), ("kept", C))}
        mine["successes"], mine["returns"] = torch.zeros(T, dtype=f64), torch.zeros(T, dtype=f64)
        extra = self.replaced  # the episodes a refill replaced (groups, episodes, wins, return)
        mine["episodes"][task] = batch.num_episodes + float(extra[1])
        mine["successes"][task] = float(success.sum()) + float(extra[2])
        mine["returns"][task] = float(batch.returns.sum()) + float(extra[3])
        mine["kept"][me] = kept
        if mt.skip_solved is not None:
            mine["task_of"] = torch.zeros(C, dtype=f64)
            mine["task_of"][me] = task + 1
        valid = batch.obs[batch.mask]
        agreed = strategy.reduce_stats(
            sums={
                "obs": Moments.of(valid).to_flat(),
                **mine,
                "dropped_groups": torch.tensor([adv.num_dropped_groups], dtype=f64),
                "refilled_groups": extra[:1].clone(),
                "env_steps": torch.tensor([batch.env_steps], dtype=f64),
            }
        )
        counts = agreed.sums
        w = self.weights(counts)
        if strategy.stats_agreed:
            scale, kept_total = w.loss_scale(me), int(counts["kept"].sum())
        else:  # ps-asp/bap: each worker's gradient is the mean over its own kept steps
            # (sending zero gradients instead of skipping made ps-bap learn worse: measured)
            scale, kept_total = 1.0, kept
        if mt.self_imitation:
            self.remember(task, batch)
        metrics = self.update(batch, adv, scale, kept_total)
        # Count-weighted merge across ranks, but not of an iteration whose updates were skipped
        # for NaN/Inf (agreed: the skip count is global): one NaN observation would poison the
        # normalizer for good.
        if metrics.get("train/skipped_updates", 0):
            agreed = Agreed({k: v for k, v in agreed.sums.items() if k != "obs"})
        self.absorb(agreed)
        metrics |= self.summary()
        for h in self.hooks:
            h.after_update(self, metrics)
        return metrics

    def merge_obs_moments(self, flat_sum: torch.Tensor) -> None:
        """The observation normalizer takes in the agreed moments when they are finite."""
        if self.policy.normalizer.enabled and bool(torch.isfinite(flat_sum).all()):
            self.policy.normalizer.update(Moments.from_flat_sum(flat_sum))

    def weights(self, counts: dict[str, torch.Tensor]) -> GradientWeights:
        """Every collector's gradient weight and every task's share, from the kept episodes of
        every collector (and, when solved tasks are skipped, the task each trained)."""
        kept_per_rank = [int(k) for k in counts["kept"].tolist()]
        C = self.strategy.num_collectors
        trained = counts.get("task_of")
        tasks = None if trained is None else [int(t) - 1 for t in trained.tolist()]
        return gradient_weights(
            len(self.task_names), C, self.iteration, kept_per_rank, self.mt.balance, tasks
        )

    # ---- agreed statistics (a collecting rank's reduce_stats, a server's messages) ----------
    def absorb(self, agreed: Agreed) -> None:
        """The normalizer merges the observation moments (count-weighted across ranks, when
        finite and present); the
        counts add up until the next ``summary`` (a parameter server may take in several
        workers' messages, one at a time under ps-asp, before it records an iteration)."""
        named = dict(agreed.sums)
        if "obs" in named:
            self.merge_obs_moments(named.pop("obs"))
        named.pop("obs", None)  # (normalizer off, or an iteration skipped for NaN/Inf)
        self._env_steps += int(named["env_steps"].sum())
        pending = self._served
        self._served = {k: v.clone() + (pending[k] if pending else 0) for k, v in named.items()}

    def summary(self) -> dict[str, Any]:
        counts, self._served = self._served, None
        if counts is None:
            return {}
        return self.task_metrics(counts, self.weights(counts).task_shares)

    def remember(self, task: int, batch: EpisodeBatch) -> None:
        """Keep the steps of ``batch``'s successful episodes for the demonstrations term, the
        newest ``self_imitation`` of ``task``'s."""
        real = batch.mask & batch.success[:, None]
        if not bool(real.any()):
            return
        obs, actions = batch.obs[real], batch.actions[real]
        if task in self.own:
            old_obs, old_actions = self.own[task]
            obs, actions = torch.cat((old_obs, obs)), torch.cat((old_actions, actions))
        cap = self.mt.self_imitation
        self.own[task] = (obs[-cap:].clone(), actions[-cap:].clone())

    def bc_pool(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """What the demonstrations term draws from: the demonstrations' steps, and this rank's
        own successful ones (--multitask.self-imitation), in task order."""
        if self.demo_obs is None or self.demo_actions is None:
            return None
        own = [self.own[t] for t in sorted(self.own)]
        if not own:
            return self.demo_obs, self.demo_actions
        return (
            torch.cat([self.demo_obs, *(o for o, _ in own)]),
            torch.cat([self.demo_actions, *(a for _, a in own)]),
        )

    def update(
        self, batch: EpisodeBatch, adv: EpisodeAdvantages, scale: float, kept_total: int
    ) -> dict[str, Any]:
        """PPO-clip epochs on this rank's kept steps, the loss scaled by this rank's gradient
        weight; ``num_minibatches`` per epoch on every rank (some may be empty), so the
        per-minibatch all-reduces line up."""
        pool = self.bc_pool()
        demos = pool is not None
        if kept_total == 0 and not demos:  # every rank dropped every group: agreed, so all
            return {"train/updates": 0}  # skip together (with demos the BC term still trains)
        a = self.cfg.agent
        mask = adv.mask
        obs, actions = batch.obs[mask], batch.actions[mask]
        old_logp, advantages = batch.logprobs[mask], adv.advantages[mask]
        steps = obs.shape[0]
        zero = obs.new_zeros(())

        def shuffle() -> list[torch.Tensor]:
            perm = torch.randperm(steps, generator=self.shuffle_gen)
            return list(perm.tensor_split(a.num_minibatches))

        # The demonstration minibatches: a function of (seed, iteration), like the env's
        # randomness, so nothing extra is checkpointed.
        demo_gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self.iteration)

        def gradient(idx: torch.Tensor) -> torch.Tensor:
            new_logp, entropy, _ = self.policy.evaluate(obs[idx], actions[idx])
            every = torch.ones_like(new_logp, dtype=torch.bool)
            loss, parts = rloo_policy_loss(
                new_logp, old_logp[idx], advantages[idx], every, a.clip_coef, entropy, a.ent_coef
            )
            loss = loss * scale
            if pool is not None:  # the mean over ranks keeps bc_coef (each rank's term is
                # over the same demonstrations, plus its own successes with self-imitation)
                pool_obs, pool_actions = pool
                n = pool_obs.shape[0]
                j = torch.randint(n, (min(self.mt.bc_batch_size, n),), generator=demo_gen)
                bc = bc_loss(self.policy, pool_obs[j], pool_actions[j])
                loss = loss + self.mt.bc_coef * bc
            return self.ppo.backward(loss, parts | {"v_loss": zero})

        out = self.ppo.epochs(shuffle, gradient, self.strategy)
        del out["loss/value"]  # no critic
        return out

    def task_metrics(
        self, counts: dict[str, torch.Tensor], shares: dict[int, float]
    ) -> dict[str, Any]:
        """Per task trained this iteration (its ranks together): success, return, episodes,
        gradient share; overall success; the suite's success and the early-stop streak."""
        episodes = counts["episodes"]
        out: dict[str, Any] = {}
        for t in episodes.nonzero().flatten().tolist():
            n = float(episodes[t])
            name = self.task_names[t]
            self.task_success[t] = float(counts["successes"][t]) / n
            out[f"task/{name}/success"] = float(self.task_success[t])
            out[f"task/{name}/return"] = float(counts["returns"][t]) / n
            out[f"task/{name}/episodes"] = int(n)
            out[f"task/{name}/grad_share"] = shares.get(t, 0.0)
        total = float(episodes.sum())
        seen = ~torch.isnan(self.task_success)
        suite = float(self.task_success.mean()) if bool(seen.all()) else None
        target = self.mt.early_stop_success
        self.streak = (
            self.streak + 1 if target is not None and suite is not None and suite >= target else 0
        )
        return {
            "success": float(counts["successes"].sum()) / total,
            "success/suite": suite,
            "episode_return_mean": float(counts["returns"].sum()) / total,
            "episodes": int(total),
            "rloo/dropped_groups": int(counts["dropped_groups"].sum()),
            "rloo/refilled_groups": int(counts["refilled_groups"].sum()),
            "rloo/kept_episodes": int(counts["kept"].sum()),
            "early_stop/streak": self.streak,
            **out,
        }

    def reached_early_stop(self) -> bool:
        """Agreed on every rank: the streak is computed from agreed numbers. Where a worker's
        numbers are partial (ps-asp/bap), its parameter server decides for it
        (``strategy.stop_requested``)."""
        if not (self.strategy.stats_agreed or self.strategy.role.server):
            return False
        return self.streak >= self.mt.early_stop_patience

    @property
    def early_stop_reason(self) -> str:
        return (
            f"early stop: suite success >= {self.mt.early_stop_success} for {self.streak} "
            f"iterations"
        )

    # ---- checkpoints -----------------------------------------------------------------------
    def rank_state(self) -> dict[str, Any]:
        """What differs per rank: the schedule's cursors, RNG and the shuffle generator."""
        assert self.schedule is not None, "a rank that collects has a schedule"
        return {
            "schedule": self.schedule.state_dict(),
            "rng": seeding.capture_rng_state(),
            "shuffle_rng": self.shuffle_gen.get_state(),
            "own": {t: (o.cpu(), a.cpu()) for t, (o, a) in self.own.items()},
        }

    def load_rank_state(self, mine: dict[str, Any]) -> None:
        if not mine or self.schedule is None:  # a parameter server's own slot
            return
        self.schedule.load_state_dict(mine["schedule"])
        seeding.restore_rng_state(mine["rng"])
        self.shuffle_gen.set_state(mine["shuffle_rng"])
        dev = next(self.policy.parameters()).device
        self.own = {  # (checkpoints from before self-imitation have none)
            int(t): (o.to(dev), a.to(dev)) for t, (o, a) in mine.get("own", {}).items()
        }

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

    def close(self) -> None:
        for env in self.envs.values():
            env.close()
