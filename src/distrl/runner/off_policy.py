"""The off-policy learners (--algorithm dqn, pqn, sac, td3): the algorithm plug-in of
``runner.base.Runner`` for replay-based and rollout-based Q-learning.

One iteration of a rank that collects and learns (``Runner.iterate``):

    collect()       --agent.num-steps steps of --env.num-envs envs with the exploring policy
                    (uniform actions until --offpolicy.learning-starts transitions), into the
                    replay (dqn, sac, td3) or this iteration's rollout (pqn)
    learn_step()    one exchange that agrees on the env steps, every collector's episode
                    window and rollout time (``Strategy.reduce_stats``); then the updates,
                    each minibatch's gradient combined through ``strategy.step`` as PPO's:
                    --offpolicy.updates replay minibatches, or PQN's epochs over its rollout

Each rank keeps its own replay (its own envs' transitions, as FastTD3's multi-GPU trainer does),
so under allreduce one update averages world-size minibatches; a prioritized replay keeps its
own priorities, from its own rows' TD errors. The replay is part of the rank's state:
checkpoints hold it (``--offpolicy.save-replay``), and the n-step window of each env's last
steps (``--offpolicy.n-step``) with it, so a resume continues bit for bit.

Ape-X (``--dist.strategy learner-actor``, dqn, sac, td3): an actor collects as above, but the
rows it would add to a replay (n-step rows where asked: the actors build them) go to its
learner instead (``take_transitions``, one message per iteration); a learner collects nothing,
adds its actors' rows to its replay in actor order (``RemoteTransitions``) and updates as a
collecting rank does, the learners' gradients all-reduced among them. It holds
--offpolicy.buffer-size rows and samples --offpolicy.batch-size rows per actor: with one learner
the batch and the rows kept per env step are those of allreduce on as many ranks as it has
actors. A prioritized replay's
new rows take the largest priority so far, on the learner: it holds the target network the TD
errors need, and the first update that draws a row sets its priority from the newest weights.

PQN under learner-actor: an actor sends its whole rollout the same way, as rows with their
``truncated`` flags; the learner computes each actor's Q(lambda) returns under its own network
(``RemoteTransitions.pqn_data``) and takes --agent.num-minibatches minibatches of all its actors'
rows per epoch, so each step's batch is that of allreduce on as many ranks as it has actors. The
actor waits for the weights its rollout trained (``--dist.sync on-policy``), as PQN learns on the
data of its current network; ``async`` is refused, PQN having no off-policy correction.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from distrl.algorithms.dqn import DQN, QLearner
from distrl.algorithms.off_policy import OffPolicyLearner, epsilon
from distrl.algorithms.pqn import PQN, q_lambda_returns
from distrl.algorithms.sac import SAC
from distrl.algorithms.td3 import TD3
from distrl.config import TrainConfig
from distrl.distributed.base import Agreed, StatsLayout, Strategy
from distrl.envs.core import VecEnv
from distrl.policy import ActorCritic
from distrl.runner.base import Runner
from distrl.runner.collector import (
    EnvStepError,
    NonFiniteEnvError,
    append_window,
    env_state,
    episode_summary,
    load_env_state,
)
from distrl.runner.hooks import Hooks
from distrl.runner.learner import restore_generator
from distrl.storage.nstep import NStepWindow
from distrl.storage.replay import PrioritizedReplayBuffer, ReplayBuffer
from distrl.storage.rollout import WINDOW
from distrl.telemetry import Telemetry

LEARNERS: dict[str, Callable[[ActorCritic, TrainConfig], OffPolicyLearner]] = {
    "dqn": DQN,
    "pqn": PQN,
    "sac": SAC,
    "td3": TD3,
}


class OffPolicyRunner(Runner):
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
        name = cfg.algorithm or ""
        check_off_policy_env(cfg, env)
        self.policy = ActorCritic.for_env(env, cfg.policy)
        self.learner = LEARNERS[name](self.policy, cfg)
        device = env.device
        N, T = env.num_envs, cfg.agent.num_steps
        space = env.action_space
        stored = space.shape if space.categorical else (len(space.low),)
        action_dtype = torch.long if space.categorical else torch.float32
        self.replay: ReplayBuffer | None = None
        self.nstep: NStepWindow | None = None
        role = strategy.role
        # Ape-X: an actor sends its rows to its learner (the outbox), a learner stores its
        # actors' rows (``remote``); a rank that does both keeps its own replay
        self.outbox: list[dict[str, torch.Tensor]] | None = None
        self.per = 1  # the collectors whose rows this rank's replay holds
        self.remote: RemoteTransitions | None = None
        if self.learner.replay:
            o = cfg.offpolicy
            layout = (env.obs_dim, self.policy.obs_dtype, stored, action_dtype)
            # an Ape-X learner keeps and samples per actor, as allreduce does per rank
            self.per = max(role.remote_rollouts, 1)
            if role.learner:
                self.replay = make_replay(cfg, *layout, device, self.seed, self.per)
            else:
                self.outbox = []
            if o.n_step > 1 and role.collector:
                self.nstep = NStepWindow(o.n_step, N, *layout, cfg.agent.gamma, device)
            if role.learner and not role.collector:
                self.remote = RemoteTransitions(self)
            if self.outbox is not None and o.actor_epsilon is not None:
                assert isinstance(self.learner, QLearner)
                i, actors = strategy.collector_index, strategy.num_collectors
                power = 1.0 + 7.0 * i / (actors - 1) if actors > 1 else 1.0
                self.learner.fixed_eps = o.actor_epsilon**power  # Ape-X's epsilon_i
            per = ReplayBuffer.bytes_per_transition(
                *layout, discount=o.n_step > 1, prioritized=o.prioritized
            )
            where = "per learner" if self.remote is not None or self.outbox is not None else ""
            size = o.buffer_size * self.per
            self.message(
                f"replay: {size:,} transitions x {per} B = "
                f"{_size(size * per)} on {device} {where or 'per rank'}"
            )
        elif not role.learner:  # a PQN actor: its rollout's rows go to its learner
            self.outbox = []
        elif not role.collector:  # a PQN learner: its actors' rollouts, as rows
            self.remote = RemoteTransitions(self)
        z: dict[str, Any] = dict(device=device)
        # this iteration's rollout (PQN; the replay learners only read its rewards' check)
        self.rollout = {
            "obs": torch.zeros(T, N, env.obs_dim, dtype=self.policy.obs_dtype, **z),
            "actions": torch.zeros(T, N, *stored, dtype=action_dtype, **z),
            "rewards": torch.zeros(T, N, **z),
            "terminated": torch.zeros(T, N, dtype=torch.bool, **z),
            "truncated": torch.zeros(T, N, dtype=torch.bool, **z),
            "final_q": torch.zeros(T, N, **z),
            "final_bad": torch.zeros(T, N, dtype=torch.bool, **z),
            "done_return": torch.zeros(T, N, **z),  # the running figures where episodes end
            "done_length": torch.zeros(T, N, **z),
            "episode_end": torch.zeros(T, N, dtype=torch.bool, **z),
        }
        self.obs = env.reset(seed=self.seed)
        self.ep_return = torch.zeros(N, **z)
        self.ep_length = torch.zeros(N, **z)
        self.window = torch.full((WINDOW, 3), -1.0, **z)
        self.last_rollout_time = 0.0
        self.shuffle_gen = torch.Generator(device=device).manual_seed(cfg.seed)
        self._env_steps = 0
        self._seen: dict[str, Any] = {"times": {}, "windows": {}, "whole": False}
        self.refilling = False  # a resume without the replay: refill with the policy, not at random
        strategy.env_rows = env.num_envs  # (the strategy's messages are sized for them)
        strategy.setup(self.learner.module, self.learner)

    # ---- counters ---------------------------------------------------------------------------
    @property
    def env_steps(self) -> int:
        return self._env_steps

    @property
    def steps_per_iteration(self) -> int:
        per_rank = self.cfg.agent.num_steps * self.env.num_envs
        return per_rank * self.strategy.num_collectors

    def schedule_lr(self) -> None:
        self.learner.schedule_lr(self.iteration)

    def set_lr(self, lr: float) -> None:
        self.learner.set_lr(lr)

    @property
    def learning(self) -> bool:
        """Updates happen this iteration: PQN always; a replay once it holds learning-starts.
        An Ape-X actor counts its learner's replay as the rows it and its learner's other
        actors (as many iterations behind as it) sent: it acts at random until then."""
        start = self.cfg.offpolicy.learning_starts
        if not self.learner.replay:  # PQN (an actor's too)
            return True
        if self.outbox is not None:
            return self._sent_rows * self._actors_per_learner >= start
        return self.replay is None or len(self.replay) >= start

    @property
    def _sent_rows(self) -> int:
        """The rows an Ape-X actor sent before this iteration (a count of the iterations, so a
        resumed actor counts the same): one per env step, the first n - 1 steps' late."""
        steps = self.iteration * self.cfg.agent.num_steps - (self.cfg.offpolicy.n_step - 1)
        return max(steps, 0) * self.env.num_envs

    @property
    def _actors_per_learner(self) -> int:
        """The actors of this actor's learner (actor i sends to learner i mod L)."""
        actors, learners = self.strategy.num_collectors, self.cfg.dist.learners
        mine = self.strategy.collector_index % learners
        return (actors - mine + learners - 1) // learners

    # ---- one iteration ----------------------------------------------------------------------
    @torch.no_grad()
    def collect(self) -> None:
        t0 = time.perf_counter()
        r, env, learner = self.rollout, self.env, self.learner
        progress = self.iteration / self.cfg.agent.max_iterations
        uniform = not self.learning and not self.refilling
        r["final_bad"].zero_()
        obs = self.obs
        for t in range(self.cfg.agent.num_steps):
            env_actions, actions = learner.explore(obs, progress, uniform)
            try:
                next_obs, reward, terminated, truncated, info = env.step(env_actions)
            except Exception as e:
                step = self.iteration * self.cfg.agent.num_steps + t
                raise EnvStepError(
                    f"rank {self.strategy.rank}: env step {step} failed (iteration "
                    f"{self.iteration}, rollout step {t}): {type(e).__name__}: {e}"
                ) from e
            done = terminated | truncated
            r["obs"][t], r["actions"][t], r["rewards"][t] = obs, actions, reward
            r["terminated"][t], r["truncated"][t] = terminated, truncated
            after = next_obs
            if done.any():  # the observation that ended the episode, not the reset
                final = info["final_obs"]
                after = torch.where(done.view(-1, *[1] * (next_obs.dim() - 1)), final, next_obs)
                if final.is_floating_point():  # checked with the rollout (no sync here)
                    finite = torch.isfinite(final.reshape(final.shape[0], -1)).all(-1)
                    r["final_bad"][t] = done & ~finite
                if isinstance(learner, PQN) and truncated.any():
                    r["final_q"][t] = torch.where(truncated, learner.max_q(final), 0.0)
            if self.replay is not None or self.outbox is not None:
                self._store(obs, actions, reward, after, terminated, truncated)
            self._episodes(info.get("episode_end", done), info.get("score", reward), t)
            obs = next_obs
        self.obs = obs
        self.window = append_window(
            self.window, r["done_return"], r["done_length"], r["episode_end"], self.iteration
        )
        if self.cfg.env.check_finite:
            self._check_finite()
        self.last_rollout_time = time.perf_counter() - t0

    def _store(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        reward: torch.Tensor,
        after: torch.Tensor,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
    ) -> None:
        """One step of N envs into the replay (an Ape-X actor's: its outbox): as it is, or
        through the n-step window (whose rows are those of n-1 steps ago)."""
        if self.nstep is None:
            one = {"obs": obs, "actions": actions, "rewards": reward, "next_obs": after}
            one["terminated"] = terminated
            if not self.learner.replay:  # a PQN actor's: Q(lambda) tells a time limit apart
                one["truncated"] = truncated
            rows: dict[str, torch.Tensor] | None = one
        else:
            rows = self.nstep.push(obs, actions, reward, after, terminated, truncated)
        if rows is None:
            return
        if self.outbox is not None:
            self.outbox.append({k: v.clone() for k, v in rows.items()})
        else:
            assert self.replay is not None
            self.replay.add(**rows)

    def take_transitions(self) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """An Ape-X actor's message of this iteration: the rows it collected (by field, one
        step's N rows after another) and its episode window; the outbox empties."""
        assert self.outbox is not None
        taken, self.outbox = self.outbox, []
        rows = {k: torch.cat([r[k] for r in taken]) for k in taken[0]} if taken else {}
        return rows, self.window

    def _episodes(self, ended: torch.Tensor, score: torch.Tensor, t: int) -> None:
        """The running returns at step ``t`` (as PPO's collector, without a host sync); the
        window takes the episodes that ended after the rollout (``append_window``)."""
        r = self.rollout
        self.ep_return += score
        self.ep_length += 1
        r["done_return"][t], r["done_length"][t] = self.ep_return, self.ep_length
        r["episode_end"][t] = ended
        self.ep_return.masked_fill_(ended, 0.0)
        self.ep_length.masked_fill_(ended, 0.0)

    def _check_finite(self) -> None:
        r = self.rollout
        fields = {"reward": r["rewards"]}
        if r["obs"].is_floating_point():
            fields["observation"] = r["obs"]
            fields['final observation (info["final_obs"] where an episode ended)'] = torch.where(
                r["final_bad"], float("nan"), 0.0
            )
        for what, x in fields.items():
            bad = ~torch.isfinite(x.reshape(x.shape[0], x.shape[1], -1)).all(-1)
            if bad.any():
                t, n = (int(v) for v in bad.nonzero()[0])
                raise NonFiniteEnvError(
                    f"rank {self.strategy.rank}: env {n} returned a non-finite {what} at "
                    f"iteration {self.iteration}, rollout step {t}; the update was not run"
                )

    @property
    def stats_layout(self) -> StatsLayout:
        return StatsLayout(
            (("env_steps", (1,)),), (("rollout_time", (1,)), ("episodes", (WINDOW, 3)))
        )

    def learn_step(self) -> dict[str, Any]:
        for h in self.hooks:
            h.before_update(self)
        steps = self.cfg.agent.num_steps * self.env.num_envs
        seconds, window = self.last_rollout_time, self.window
        if self.remote is not None:  # an Ape-X learner: its actors' steps and episodes
            steps *= self.remote.slots
            seconds, window = self.remote.last_rollout_time, self.remote.window
        agreed = self.strategy.reduce_stats(
            sums={"env_steps": torch.tensor([float(steps)], dtype=torch.float64)},
            gather={
                "rollout_time": torch.tensor([seconds], dtype=torch.float64),
                "episodes": window.to(self.window.device),
            },
        )
        self.absorb(agreed)
        metrics: dict[str, Any] = self.update() if self.learning else {"train/updates": 0}
        own = self.learner.metrics()
        if self.remote is not None:  # an Ape-X learner explores nothing: its actors' schedule
            own = {"epsilon": epsilon(self.cfg, self.iteration / self.cfg.agent.max_iterations)}
            own = own if isinstance(self.learner, QLearner) else {}
            own = own if self.cfg.offpolicy.actor_epsilon is None else {}
        metrics |= own | self.summary()
        metrics["lr"] = self.learner.lr
        if self.replay is not None:
            metrics["replay/size"] = len(self.replay)
        if isinstance(self.replay, PrioritizedReplayBuffer):
            metrics["replay/beta"] = self.priority_beta
        for h in self.hooks:
            h.after_update(self, metrics)
        return metrics

    @property
    def priority_beta(self) -> float:
        """The importance-sampling exponent of this iteration: --offpolicy.priority-beta at the
        start, linearly to 1 at --agent.max-iterations (Schaul et al.'s annealing)."""
        beta = self.cfg.offpolicy.priority_beta
        progress = min(self.iteration / self.cfg.agent.max_iterations, 1.0)
        return beta + progress * (1.0 - beta)

    def minibatches(self) -> Iterator[dict[str, torch.Tensor]]:
        """This iteration's minibatches: from the replay, each drawn when its update comes (a
        prioritized replay draws with the priorities the previous updates left), or PQN's
        epochs over its rollout."""
        replay, o = self.replay, self.cfg.offpolicy
        batch = o.batch_size * self.per
        if isinstance(replay, PrioritizedReplayBuffer):
            beta = self.priority_beta
            return (replay.sample(batch, beta) for _ in range(o.updates))
        if replay is not None:
            return (replay.sample(batch) for _ in range(o.updates))
        return iter(self._pqn_minibatches())

    def _pqn_minibatches(self) -> list[dict[str, torch.Tensor]]:
        """PQN's epochs over this iteration's rollout (a learner's: its actors' rollouts, one
        after another), with its Q(lambda) returns."""
        a, r = self.cfg.agent, self.rollout
        learner = self.learner
        assert isinstance(learner, PQN)
        T, N = r["rewards"].shape
        lam = self.cfg.offpolicy.q_lambda
        if self.remote is not None:
            data = self.remote.pqn_data(learner, T, N, a.gamma, lam)
        else:
            with torch.no_grad():
                after = torch.cat([r["obs"][1:], self.obs.unsqueeze(0)])
                next_q = learner.max_q(after.reshape(T * N, -1)).reshape(T, N)
                returns = q_lambda_returns(
                    r["rewards"], r["terminated"], r["truncated"], next_q, r["final_q"],
                    a.gamma, lam,
                )  # fmt: skip
            data = {
                "obs": r["obs"].reshape(T * N, -1),
                "actions": r["actions"].reshape(T * N),
                "returns": returns.reshape(T * N),
            }
        rows, out = data["returns"].shape[0], []
        for _ in range(a.num_epochs):
            order = torch.randperm(rows, generator=self.shuffle_gen, device=self.env.device)
            for idx in order.chunk(a.num_minibatches):
                out.append({k: v[idx] for k, v in data.items()})
        return out

    def update(self) -> dict[str, Any]:
        """Each minibatch's gradient through the strategy; the decision scalars' means."""
        names = self.learner.SCALARS
        sums = [0.0] * len(names)
        steps = skipped = 0
        for batch in self.minibatches():
            decision = self.strategy.step(self.learner, self.learner.gradient(batch))
            if decision.action != "step":
                skipped += 1
                continue
            steps += 1
            sums = [s + v for s, v in zip(sums, decision.stats, strict=True)]
            if isinstance(self.replay, PrioritizedReplayBuffer):
                assert self.learner.td_abs is not None, "its loss reads the weights"
                self.replay.update_priorities(batch["index"], self.learner.td_abs)
        means = {k: v / max(steps, 1) for k, v in zip(names, sums, strict=True)}
        return means | {"train/updates": steps, "train/skipped_updates": skipped}

    def absorb(self, agreed: Agreed) -> None:
        sums, seen = agreed.sums, self._seen
        self._env_steps += int(sums["env_steps"].sum())
        times, windows = agreed.gathered["rollout_time"], agreed.gathered["episodes"]
        for i, r in enumerate(agreed.ranks or range(times.shape[0])):
            seen["times"][r], seen["windows"][r] = times[i], windows[i]
        if agreed.collectors is not None:
            for r in set(seen["times"]) - set(agreed.collectors):
                del seen["times"][r], seen["windows"][r]
        seen["whole"] = agreed.collectors is not None

    def summary(self) -> dict[str, Any]:
        seen = self._seen
        ranks = sorted(seen["times"])
        times = [seen["times"][r] for r in ranks] or [torch.zeros(1, dtype=torch.float64)]
        windows = [seen["windows"][r] for r in ranks] or [torch.full((WINDOW, 3), -1.0)]
        return episode_summary(torch.stack(times), torch.stack(windows))

    # ---- --agent.target-return ---------------------------------------------------------------
    def reached_early_stop(self) -> bool:
        target = self.cfg.agent.target_return
        if target is None or not self._seen["whole"]:
            return False
        mean = self.summary()["episode_return_mean"]
        return mean is not None and mean >= target

    @property
    def early_stop_reason(self) -> str:
        mean = self.summary()["episode_return_mean"]
        return (
            f"target return {self.cfg.agent.target_return:g} reached (episode_return_mean "
            f"{mean:.2f}, every rank's newest episodes)"
        )

    # ---- checkpoints -------------------------------------------------------------------------
    def algorithm_state(self) -> dict[str, Any]:
        return {"offpolicy": self.learner.state_dict()}

    def load_algorithm_state(self, state: dict[str, Any]) -> None:
        self.learner.load_state_dict(state["offpolicy"])
        self._env_steps = int(state["env_steps"])

    def rank_state(self) -> dict[str, Any]:
        """What differs per rank: the env, the RNG, the episode bookkeeping, the replay."""
        state = {**env_state(self), "shuffle_rng": self.shuffle_gen.get_state()}
        if self.replay is not None:
            state["replay"] = self.replay.state_dict(rows=self.cfg.offpolicy.save_replay)
        if self.nstep is not None:
            state["nstep"] = self.nstep.state_dict()
        return state

    def load_rank_state(self, mine: dict[str, Any]) -> None:
        if not mine:
            return
        load_env_state(self, mine, self.env.device)
        restore_generator(self.shuffle_gen, mine["shuffle_rng"], "minibatch shuffle")
        if ("nstep" in mine) != (self.nstep is not None):
            saved = "an n-step window" if "nstep" in mine else "no n-step window"
            raise ValueError(
                f"the checkpoint holds {saved} and this run's --offpolicy.n-step "
                f"{self.cfg.offpolicy.n_step} the other; resume with the saved run's"
            )
        if self.nstep is not None:
            self.nstep.load_state_dict(mine["nstep"])
        if self.replay is not None:
            self.replay.load_state_dict(mine["replay"])
            if len(self.replay) == 0 and self.iteration > 0:
                self.refilling = True
                self.message(
                    "resume: the checkpoint holds no replay (--offpolicy.save-replay false); "
                    f"the policy refills {self.cfg.offpolicy.learning_starts:,} transitions "
                    "before the updates go on, so this run does not match the uninterrupted one"
                )

    def close(self) -> None:
        self.env.close()


class RemoteTransitions:
    """An Ape-X learner's stand-in for its own envs: its actors' rows go into its replay, in
    actor order (``TransitionCodec.decode_into``), with their merged episode window and their
    slowest rollout time (``Learner.receive_rollouts`` sets them)."""

    def __init__(self, runner: OffPolicyRunner):
        self.runner, self.device = runner, runner.env.device
        self.rollouts: list[dict[str, torch.Tensor]] = []  # PQN: this iteration's, by actor
        self.slots = 0
        self.window = torch.full((WINDOW, 3), -1.0)
        self.ret = torch.zeros(3, dtype=torch.float64)
        self.last_rollout_time = 0.0

    def resize(self, slots: int) -> None:
        """How many actors' rows this iteration holds (fewer after one was dropped)."""
        self.slots = slots

    def add_rows(self, rows: dict[str, torch.Tensor]) -> None:
        """One actor's rows: into the replay, or (PQN) kept as that actor's rollout."""
        replay = self.runner.replay
        if replay is None:
            self.rollouts.append(rows)
        elif rows and len(rows["rewards"]):
            replay.add(**rows)

    @torch.no_grad()
    def pqn_data(
        self, learner: PQN, T: int, N: int, gamma: float, lam: float
    ) -> dict[str, torch.Tensor]:
        """PQN's training rows from this iteration's actors' rollouts (each T steps of N rows,
        one step after another), their Q(lambda) returns under the learner's network: the next
        observation of every row is its ``next_obs`` (the final one where an episode ended), so
        max_a Q(s', a) is one batch, and a time limit bootstraps from the same value."""
        parts: dict[str, list[torch.Tensor]] = {"obs": [], "actions": [], "returns": []}
        taken, self.rollouts = self.rollouts, []
        for rows in taken:
            if len(rows.get("rewards", ())) != T * N:
                continue  # (an actor's message with no rollout: nothing to learn from)
            nxt = learner.max_q(rows["next_obs"]).view(T, N)
            returns = q_lambda_returns(
                rows["rewards"].view(T, N), rows["terminated"].view(T, N),
                rows["truncated"].view(T, N), nxt, nxt, gamma, lam,
            )  # fmt: skip
            parts["obs"].append(rows["obs"])
            parts["actions"].append(rows["actions"].reshape(T * N))
            parts["returns"].append(returns.reshape(T * N))
        return {k: torch.cat(v) for k, v in parts.items()}


def make_replay(
    cfg: TrainConfig,
    obs_dim: int,
    obs_dtype: torch.dtype,
    action_shape: tuple[int, ...],
    action_dtype: torch.dtype,
    device: torch.device,
    seed: int,
    per: int = 1,
) -> ReplayBuffer:
    """The rank's replay: uniform, or prioritized (--offpolicy.prioritized); with a discount per
    row when it holds n-step transitions. ``per``: the collectors it holds the rows of (an
    Ape-X learner's actors): --offpolicy.buffer-size rows for each."""
    o = cfg.offpolicy
    size = o.buffer_size * per
    layout = (size, obs_dim, obs_dtype, action_shape, action_dtype, device, seed)
    if o.prioritized:
        return PrioritizedReplayBuffer(
            *layout, o.n_step > 1, alpha=o.priority_alpha, eps=o.priority_eps
        )
    return ReplayBuffer(*layout, discount=o.n_step > 1)


def _size(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def check_action_space(algorithm: str, env: VecEnv) -> None:
    """Refuse an env whose actions the algorithm cannot take, naming the ones that can."""
    kind = env.action_space.kind
    discrete = algorithm in ("dqn", "pqn")
    if discrete and kind != "discrete":
        raise ValueError(
            f"--algorithm {algorithm} takes one discrete action per step, and this env's "
            f"actions are {kind}; use --algorithm sac or td3 (continuous), or ppo"
        )
    if not discrete and kind != "continuous":
        raise ValueError(
            f"--algorithm {algorithm} takes continuous actions, and this env's are {kind}; use "
            f"--algorithm dqn or pqn (discrete), or ppo"
        )


def check_off_policy_env(cfg: TrainConfig, env: VecEnv) -> None:
    """Refuse an env or head the off-policy algorithm ``cfg.algorithm`` cannot train."""
    check_action_space(cfg.algorithm or "", env)
    check_head(cfg.algorithm or "", cfg.policy.head)
    if env.action_space.mask_in_obs:
        raise ValueError(
            f"--algorithm {cfg.algorithm} does not read a legal-action mask (its targets' max "
            f"would count illegal actions); train this task with ppo"
        )
    if cfg.agent.lr_schedule == "adaptive":
        raise ValueError(
            f"--agent.lr-schedule adaptive follows PPO's KL, which --algorithm {cfg.algorithm} "
            f"has none of; use constant or linear"
        )


def check_head(algorithm: str, head: str) -> None:
    """SAC samples from a squashed Gaussian, TD3 acts through tanh: refuse another head."""
    want = {"sac": "squashed-gaussian", "td3": "tanh"}.get(algorithm, "default")
    if head != want:
        raise ValueError(
            f"--algorithm {algorithm} trains --policy.head {want}, not {head}; drop --policy.head"
        )
