"""The runner skeleton every algorithm shares: seeding, the steps of one iteration, its record,
logging, hooks and checkpoints. ``learn()`` runs this rank's role loop (``runner/roles.py``):
collect and learn, serve, learn from actors, or act; every role is built from the steps here.
The strategy is handed in and never built here.

The algorithm is the other plug-in axis: a subclass supplies what one iteration collects and
how it learns from it (``OnPolicyRunner``: PPO with GAE over fixed-length rollouts;
``EpisodicRunner``: multi-task RLOO over exact episode counts), its statistics layout, how it
takes in agreed statistics (``absorb``, the same on a collecting rank and on a parameter
server) and what it adds to a checkpoint. Neither axis knows the other: any algorithm runs
under any strategy that ``distributed/strategies.check_strategy`` does not refuse.

    def iterate(self):                          # one iteration of a rank that collects and learns
        begin()                                 # heartbeat, LR schedule
        collect()                               # algorithm: rollout or episodes
        metrics = learn_step()                  # algorithm: advantages, agreed stats, update
        iteration += 1; log(record(...)); checkpoint when due
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any

from distrl import checkpoint as ckpt
from distrl import interrupts, startup
from distrl.algorithms.ppo import PPO
from distrl.config import TrainConfig, to_dict
from distrl.distributed.base import Agreed, StatsLayout, Strategy
from distrl.evaluation import TrainingEvaluation
from distrl.policy import ActorCritic
from distrl.runner import roles
from distrl.runner.collector import Collector
from distrl.runner.hooks import Hooks
from distrl.seeding import rank_seed, seed_everything
from distrl.telemetry import Telemetry
from distrl.training_state import TrainingState

RANK_TIMES = ("rollout", "learn", "comm", "sync")
"""Each rank's seconds of an iteration, as ``rank/<r>/<name>`` in its record (allreduce)."""


class Runner(ABC):
    """The steps every role loop is built from; subclasses are the algorithms."""

    policy: ActorCritic
    ppo: PPO
    collector: Collector | None = None
    """This rank's own envs (a rank that collects fixed-length rollouts)."""
    remote: Any = None
    """Other ranks' rollouts side by side (a PPO learner of learner-actor: ``RemoteRollouts``),
    or where their replay rows go (an Ape-X learner: ``off_policy.RemoteTransitions``)."""

    def __init__(
        self,
        cfg: TrainConfig,
        strategy: Strategy,
        telemetry: Telemetry | None = None,
        run_dir: Path | None = None,
        hooks: list[Hooks] | None = None,
    ):
        self.cfg, self.strategy = cfg, strategy
        self.tel = telemetry or Telemetry()  # the base class is the null object
        self.open_sinks: Callable[[], Telemetry] | None = None
        """Opens this run's sinks here (the session sets it): ``take_over_writing``."""
        self.run_dir = run_dir
        # the evaluation during training (--eval.interval, --eval.video-interval) first, so the
        # user's hooks see its figures in the record
        self.hooks: list[Hooks] = [TrainingEvaluation(), *(hooks or [])]
        self.seed = rank_seed(cfg.seed, strategy.seed_rank)
        seed_everything(self.seed)
        self.iteration = 0
        self.wall_offset = 0.0
        self._start = time.perf_counter()
        self.last_checkpoint: Path | None = None  # the newest this process wrote
        self.stop_request: str | None = None  # why a hook of this process asked to stop
        self.stopped_early: str | None = None  # the algorithm's early stop once decided: why
        self.last_record: dict[str, Any] | None = None  # the newest iteration's, on every rank

    # ---- the algorithm plug-in ----------------------------------------------------------------
    @abstractmethod
    def collect(self) -> None:
        """This iteration's experience (a rollout, or exact episode counts), checked."""

    @abstractmethod
    def learn_step(self) -> dict[str, Any]:
        """Advantages, the agreed statistics, the update through ``strategy.step``; returns
        the iteration's metrics (hooks ``before_update``/``after_update`` around it)."""

    @property
    @abstractmethod
    def env_steps(self) -> int:
        """Env steps of every collector together, since the run began."""

    @property
    @abstractmethod
    def stats_layout(self) -> StatsLayout:
        """What ``learn_step`` hands ``strategy.reduce_stats``, by name and shape."""

    @abstractmethod
    def algorithm_state(self) -> dict[str, Any]:
        """What the algorithm adds to a checkpoint besides policy, iteration and ranks."""

    @abstractmethod
    def load_algorithm_state(self, state: dict[str, Any]) -> None: ...

    @abstractmethod
    def rank_state(self) -> dict[str, Any]:
        """What differs per rank (env, RNG, cursors, this rank's shuffle)."""

    @abstractmethod
    def load_rank_state(self, mine: dict[str, Any]) -> None: ...

    @abstractmethod
    def absorb(self, agreed: Agreed) -> None:
        """Take in agreed statistics: ``learn_step`` hands it what ``reduce_stats`` returned, a
        parameter server each statistics message of its workers (``StatsLayout.agreed``). The
        algorithm merges its normalizers and counts env steps and episodes here."""

    @abstractmethod
    def summary(self) -> dict[str, Any]:
        """The episode (or task) figures of what ``absorb`` took in since the last summary."""

    def reached_early_stop(self) -> bool:
        """The algorithm's early-stop test on what it has taken in so far, the same on every
        rank that sees every collector; none by default."""
        return False

    @property
    def early_stop_reason(self) -> str:
        """Why ``reached_early_stop`` holds, in words (``stopped`` in the last record)."""
        return "the algorithm stopped early"

    @property
    def stop_early(self) -> bool:
        """The agreed early stop. Once decided it stands, with its reason as it read then: a
        parameter server under ps-asp/bap decides on the rounds it has, and the workers that
        were mid-iteration finish it and report episodes that can move the test back."""
        if self.stopped_early is None and self.reached_early_stop():
            self.stopped_early = self.early_stop_reason
        return self.stopped_early is not None

    def close(self) -> None:  # noqa: B027 (optional: not every algorithm holds envs)
        """Release the envs."""

    # ---- the steps of an iteration --------------------------------------------------------
    def learn(self) -> dict[str, Any]:
        """Train until done: this rank's role loop (``runner/roles.py``)."""
        self._start = time.perf_counter() - self.wall_offset
        for h in self.hooks:
            if hasattr(h, "on_training_start"):  # (hooks that do not subclass Hooks may lack it)
                h.on_training_start(self)
        return roles.run(self)

    @property
    def done(self) -> bool:
        """The last iteration is over: the budget is spent, the algorithm stopped early, or the
        strategy says stop (an interrupt or a stop request every rank agreed on, or a parameter
        server's stop); one process stops at its own request at once."""
        if self.strategy.stop_requested:
            return True
        if self.stop_request is not None and not self.strategy.active:
            return True
        return self.iteration >= self.cfg.agent.last_iteration or self.stop_early

    def request_stop(self, reason: str) -> None:
        """Stop the run early, with the final checkpoint as after its last iteration, saying
        ``reason`` (``stopped`` in the last record and in ``TrainResult.metrics``). Any hook on
        any rank may call it. One process stops after the current iteration; ranks learn of it
        in the next iteration's exchange (the one an interrupt travels in: no extra collective)
        and all stop after that iteration (``distrl.interrupts``)."""
        if self.stop_request is None:
            self.stop_request = reason
            interrupts.request_stop(reason)

    @property
    def stop_reason(self) -> str | None:
        """Why the run stops before its last iteration, once that is decided (None: not)."""
        s = self.strategy
        if interrupts.is_signal(s.interrupt):
            return f"interrupted by {interrupts.name(s.interrupt)}"
        if self.stop_request is not None and (s.interrupt or not s.active):
            return self.stop_request
        if s.interrupt:
            return "a hook on another rank asked to stop (request_stop)"
        if self.stop_early:
            return self.stopped_early
        if s.stop_requested:  # a parameter server's worker, an actor: the coordinator's word
            return "the rank that coordinates this one stopped the run"
        return None

    def begin(self) -> None:
        """Liveness (this rank entered the iteration) and the LR schedule."""
        self.strategy.heartbeat(self.iteration)
        self.schedule_lr()

    def iterate(self) -> dict[str, Any]:
        """One iteration of a rank that collects and learns: collect, learn, log, checkpoint
        when due. Public so that benchmarks time exactly what training runs."""
        self.begin()
        steps_before = self.env_steps
        t0 = time.perf_counter()
        self.collect()
        t_rollout = time.perf_counter() - t0
        metrics = self.learn_step()
        comm, sync = self.strategy.take_times()
        self.iteration += 1
        steps = self.env_steps - steps_before
        record = self.record(time.perf_counter() - t0, metrics, steps, t_rollout, comm, sync)
        times = [t_rollout, record["time/learn"], comm, sync or 0.0]
        by_rank = self.strategy.gather_rank_times(times)
        if by_rank is not None:  # each rank's figures: who waited for whom
            for r, row in enumerate(by_rank.tolist()):
                for key, value in zip(RANK_TIMES, row, strict=True):
                    record[f"rank/{r}/{key}"] = value
        self.last_record = record
        self.log(record)
        if self.checkpoint_due():
            self.checkpoint(record["wall_time"], metrics.get("train/skipped_updates", 0))
        return record

    def schedule_lr(self) -> None:
        self.ppo.schedule_lr(self.iteration)

    def set_lr(self, lr: float) -> None:
        """The rate the next step takes (an adaptive schedule moves on from it)."""
        self.ppo.set_lr(lr)

    def finished(self) -> None:
        """After the last iteration of every role but an actor: say why the run stopped early
        (an interrupt has its own line: ``interrupts.final_line``)."""
        reason = self.stop_reason
        if reason is not None and not interrupts.is_signal(self.strategy.interrupt):
            saved = f"; final checkpoint {self.last_checkpoint}" if self.last_checkpoint else ""
            self.message(f"stopped at iteration {self.iteration}: {reason}{saved}")

    def record(
        self,
        t_iter: float,
        metrics: dict[str, Any],
        steps: int,
        rollout: float | None = None,
        comm: float = 0.0,
        sync: float | None = None,
        learn: float | None = None,
    ) -> dict[str, Any]:
        """One iteration's metrics.jsonl record, for every role: the common keys, then
        ``metrics``. ``steps``: env steps this iteration; time/learn is the iteration's time
        outside the rollout and outside collectives unless ``learn`` says otherwise."""
        if learn is None:
            learn = t_iter - (rollout or 0.0) - comm - (sync or 0.0)
        startup.mark("iteration")  # (the first record's: a later mark keeps the first)
        return {
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "wall_time": self.wall_time(),
            "unix_time": time.time(),  # when the record was made: start-up included timings
            "perf/sps": steps / max(t_iter, 1e-9),
            "time/iteration": t_iter,
            "time/rollout": rollout,
            "time/learn": learn,
            "time/comm": comm,
            "time/sync": sync if self.strategy.measures_sync else None,
            **self.strategy.record_metrics(),
            **metrics,
            **startup.take(),  # the first record of this process's run only
        }

    def wall_time(self) -> float:
        """Seconds of training so far, a resumed run's earlier time included."""
        return time.perf_counter() - self._start

    def log(self, record: dict[str, Any]) -> None:
        """Log one record: on the main rank first the evaluation when one is due, then the
        hooks' ``on_record`` additions and, once the run stops early, why (``stopped``); after
        it, the hooks' ``after_iteration`` (False from one asks to stop: ``request_stop``)."""
        for h in self.hooks:
            if hasattr(h, "on_record"):  # (hooks that do not subclass Hooks may lack it)
                h.on_record(self, record)
        reason = self.stop_reason
        if reason is not None:
            record["stopped"] = reason
        self.tel.log(record)
        for h in self.hooks:
            if h.after_iteration(self, record) is False:
                self.request_stop(f"{type(h).__name__}.after_iteration returned False")

    def message(self, text: str) -> None:
        self.tel.message(text)

    # ---- checkpoints -----------------------------------------------------------------------
    def checkpoint_due(self) -> bool:
        return self.iteration % self.cfg.agent.save_interval == 0 or self.done

    def checkpoint(self, wall_time: float, skipped: int, ranks: list[Any] | None = None) -> None:
        """Every rank calls this at a save point; rank 0 writes (``ranks``: as ``save``)."""
        # Never checkpoint right after updates skipped for NaN/Inf: the skip decision is global
        # (one combined flag), so every rank agrees to skip the save as well.
        if skipped:
            self.tel.message(
                f"checkpoint: not saving iteration {self.iteration}: {skipped} "
                f"update(s) were skipped for non-finite loss or gradients"
            )
        else:
            self.save(wall_time, ranks)
        self.strategy.take_times()  # the checkpoint's gather is not the next iteration's time

    def save(self, wall_time: float, ranks: list[Any] | None = None) -> Path | None:
        """Rank 0 writes; ``ranks`` (per-rank state) is gathered here unless given (a parameter
        server or a learner collects it from its peers' messages)."""
        if ranks is None:
            ranks = self.strategy.gather_object(self.rank_state())
        if not self.strategy.is_main or self.run_dir is None:
            return None
        state = self.training_state(rank=False).to_checkpoint(wall_time, ranks)
        meta = ckpt.run_metadata(to_dict(self.cfg), self.strategy.world_size, self.env_steps)
        keep = self.cfg.agent.keep_checkpoints
        self.last_checkpoint = ckpt.save_checkpoint(
            self.run_dir / "checkpoints", self.iteration, state, meta, keep=keep
        )
        return self.last_checkpoint

    def load(self, path: Path) -> list[str]:
        """Load the checkpoint every rank was told to load; returns notes on changed fields."""
        state, manifest = ckpt.load_checkpoint(path, map_location="cpu")
        notes = ckpt.check_resume_compatible(manifest, to_dict(self.cfg), self.strategy.world_size)
        self.load_training_state(TrainingState.from_checkpoint(state, self.strategy.rank))
        self.wall_offset = float(state["wall_time"])
        saved = manifest.get("config")
        lr = self.cfg.agent.learning_rate
        if isinstance(saved, dict) and saved.get("agent", {}).get("learning_rate", lr) != lr:
            self.set_lr(lr)  # a rate given anew (a population's explore) is the one that steps
            notes = [f"{n} (the learning rate restarts from it)" if
                     n.startswith("agent.learning_rate:") else n for n in notes]  # fmt: skip
        return notes

    # ---- the training state ----------------------------------------------------------------
    def training_state(self, rank: bool = True) -> TrainingState:
        """This rank's training state as one value (``distrl/training_state.py``); ``rank``:
        with its own part (``rank_state``), which a checkpoint gathers from every rank
        instead."""
        replica = {
            "policy": self.policy.state_dict(),
            **self.algorithm_state(),
            "iteration": self.iteration,
            "env_steps": self.env_steps,
        }
        return TrainingState(replica, self.rank_state() if rank else {}, self.last_record)

    def load_training_state(self, state: TrainingState, rank: bool = True) -> None:
        """Go on from ``state``; ``rank``: its own part too (an empty one, a dropped actor's or
        a slot's that was not in the group, leaves this rank's envs as they are)."""
        self.policy.load_state_dict(state.replica["policy"])
        self.load_algorithm_state(state.replica)
        self.iteration = state.iteration
        if rank:
            self.load_rank_state(state.rank)
        if state.record is not None:
            self.last_record = state.record
