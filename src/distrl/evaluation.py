"""Evaluation of the deterministic policy, with every episode counted that was decided in advance.

Counting "the first N episodes to finish" over a batch of envs favours short episodes: with 64
envs and N = 10, the ten that end first are kept, and in a task where failing ends an episode
early those are the failures (or, where success ends it, the successes). Here env ``i`` of ``E``
runs exactly its first ``k = ceil(N / E)`` episodes to the end, whatever their length, and
episode ``j`` of env ``i`` is counted when ``j * E + i < N``: which episodes count is fixed
before any of them runs. An env that has run its share keeps stepping (a batched env steps every
row) and its further episodes are ignored.

``evaluate`` is what ``distrl play`` prints, what ``distrl.evaluate`` returns and what
``--eval.interval`` logs during training (``Evaluator``: the main rank, its own env, the RNG
streams of training untouched; ``EvalCallback``, the same as a callback that may stop the run).

Episodic suites (reach10, MT10) are evaluated as the field reports them: ``evaluate_suite`` runs
each task from its held-out init states (goal and start positions that training and the
demonstrations never use; ``envs/episodic.py``), episode i from held-out state i, and gives the
success rate per task and their mean.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from distrl.envs.core import VecEnv
from distrl.hooks import Hooks
from distrl.seeding import rng_untouched

if TYPE_CHECKING:
    from distrl.config import TrainConfig
    from distrl.envs.episodic import EpisodicSuite, EpisodicVecEnv
    from distrl.policy import ActorCritic
    from distrl.runner.base import Runner

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

    @property
    def length_mean(self) -> float:
        return float(self.lengths.float().mean())

    def __iter__(self) -> Iterator[float]:
        """``mean, std = distrl.evaluate(...)``, as Stable-Baselines3's ``evaluate_policy``."""
        return iter((self.mean, self.std))


def evaluate(
    policy: ActorCritic,
    env: VecEnv,
    episodes: int,
    seed: int,
    before_step: Callable[[], None] | None = None,
    deterministic: bool = True,
) -> EvalResult:
    """Run ``policy.act_deterministic`` in ``env`` (reset with ``seed``) until every env has
    finished its share of the ``episodes`` (module docstring); ``before_step()`` runs before
    every step (``play --video`` takes a frame there). ``deterministic=False`` samples the
    actions instead (from torch's global RNG)."""
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
    # (a policy object of the user's own, without the recurrent API, is memoryless)
    memory = policy.initial_memory(n) if getattr(policy, "recurrent", False) else None
    with torch.no_grad():
        for _ in range(limit):
            if bool((done_count >= k).all()):
                break
            if before_step is not None:
                before_step()
            if deterministic:
                memory_arg = () if memory is None else (memory,)
                action = policy.act_deterministic(obs, *memory_arg)
            else:
                action = policy.env_action(policy.act(obs, memory=memory)[0])
            obs, rew, term, trunc, info = env.step(action)
            done = term | trunc
            # the env's score and whole episodes where it gives them (envs/core.py: Atari)
            ended = info.get("episode_end", done)
            ep_ret += info.get("score", rew).to(torch.float64)
            ep_len += 1
            finished = ended & (done_count < k)
            if finished.any():
                idx = rows[finished]
                returns[done_count[idx], idx] = ep_ret[idx]
                lengths[done_count[idx], idx] = ep_len[idx]
                done_count[idx] += 1
            if memory is not None:  # the memory restarts with every env episode (a life)
                memory.masked_fill_(done.view(-1, 1, 1), 0.0)
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


def task_env(cfg: TrainConfig, num_envs: int, device: torch.device | str) -> VecEnv:
    """A fresh env of ``cfg``'s task and env settings with ``num_envs`` envs, for evaluation."""
    from distrl.envs.registry import make_env

    env_cfg = dataclasses.replace(cfg.env, num_envs=num_envs)
    return make_env(dataclasses.replace(cfg, env=env_cfg), torch.device(device))


def film(
    task: str,
    max_episode_steps: int | None,
    device: torch.device,
    policy_for: Callable[[VecEnv], ActorCritic],
    path: str | Path,
    seed: int,
) -> tuple[int, float, float]:
    """One deterministic episode of one env of ``task``, seeded ``seed``, rendered to the mp4
    ``path`` (``distrl.render``): (frames, fps, return). ``policy_for(env)`` gives the policy;
    the return is the one ``evaluate`` gives that env and seed (a frame is only read)."""
    from distrl import render

    env, frames = render.make_video_env(task, max_episode_steps, device)
    with closing(env), closing(frames), closing(render.Mp4Writer(path, frames.fps)) as out:
        policy = policy_for(env)
        returns = evaluate(policy, env, 1, seed, lambda: out.write(frames.render())).returns
    return out.frames, frames.fps, float(returns[0])


@dataclass(frozen=True)
class SuiteResult:
    tasks: tuple[str, ...]
    success: torch.Tensor
    """[tasks, episodes] bool: episode i of task t started from init state i (mod the list)."""
    returns: torch.Tensor
    """[tasks, episodes] undiscounted returns."""
    lengths: torch.Tensor
    """[tasks, episodes] steps."""
    held_out: bool
    """Whether the episodes started from the held-out init states."""

    @property
    def per_task(self) -> dict[str, float]:
        rates = self.success.float().mean(1).tolist()
        return dict(zip(self.tasks, rates, strict=True))

    @property
    def mean(self) -> float:
        """The suite's success: the mean over tasks of each task's success rate."""
        return float(self.success.float().mean(1).mean())

    def metrics(self, prefix: str = "eval/") -> dict[str, float]:
        out = {f"{prefix}success": self.mean, f"{prefix}return_mean": float(self.returns.mean())}
        out[f"{prefix}length_mean"] = float(self.lengths.float().mean())
        return out | {f"{prefix}task/{n}/success": v for n, v in self.per_task.items()}


def evaluate_suite(
    policy: ActorCritic,
    suite: EpisodicSuite,
    tasks: tuple[str, ...],
    episodes: int,
    device: torch.device | str = "cpu",
    num_envs: int = 64,
    max_episode_steps: int | None = None,
    seed: int = 12345,
    held_out: bool = True,
    envs: dict[str, EpisodicVecEnv] | None = None,
) -> SuiteResult:
    """``policy.act_deterministic`` on every task of ``tasks``, ``episodes`` per task, episode i
    from init state i (wrapping around the list), from the held-out lists unless ``held_out`` is
    False; at most ``num_envs`` envs per task step them in parallel. ``envs``: a cache the
    caller keeps (and closes) to build each task's env once over many evaluations; without it
    each env is built and closed here."""
    from distrl.storage.episodes import collect_episodes

    if episodes < 1:
        raise ValueError(f"episodes per task must be at least 1, got {episodes}")

    def act(obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return policy.act_deterministic(obs), obs.new_zeros(obs.shape[0])

    success, returns, lengths = [], [], []
    dev = torch.device(device)
    with torch.no_grad():
        for name in tasks:
            env = envs.get(name) if envs is not None else None
            if env is None:
                n = min(num_envs, episodes)
                env = suite.make_task_env(name, n, dev, max_episode_steps, held_out=held_out)
                if envs is not None:
                    envs[name] = env
            try:
                init = torch.arange(episodes) % env.num_init_states
                batch = collect_episodes(env, act, init, 1, seed)
            finally:
                if envs is None:
                    env.close()
            success.append(batch.success.cpu())
            returns.append(batch.returns.cpu())
            lengths.append(batch.lengths.cpu())
    return SuiteResult(
        tuple(tasks), torch.stack(success), torch.stack(returns), torch.stack(lengths), held_out
    )


def suite_table(result: SuiteResult, title: str) -> str:
    """Per-task success as aligned text lines, the suite's mean last."""
    n = result.success.shape[1]
    which = "held-out" if result.held_out else "training"
    lines = [f"{title}: success over {n} episode(s) per task from {which} init states"]
    width = max(len(t) for t in result.tasks)
    for name, rate in result.per_task.items():
        lines.append(f"  {name:{width}s}  {rate:.2f}")
    lines.append(f"  {'mean':{width}s}  {result.mean:.3f}")
    return "\n".join(lines)


@contextlib.contextmanager
def eval_mode(policy: ActorCritic) -> Iterator[None]:
    """``policy`` in eval mode inside, put back in the mode it was in on exit."""
    was_training = policy.training
    policy.eval()
    try:
        yield
    finally:
        policy.train(was_training)


class Evaluator:
    """``--eval.interval``: on the main rank, every ``interval`` iterations and at the last, the
    deterministic policy's ``eval.episodes`` episodes in an env of its own seeded ``eval.seed``
    (the same episodes every time, so the curve compares policies, not draws); the best score
    so far (mean return; for an episodic suite, the held-out success: ``evaluate_suite`` with
    ``eval.episodes`` per task) is kept as ``checkpoints/best.pt`` (never picked by ``--resume``,
    never pruned; a resumed run reads the best value back from it)."""

    def __init__(self, cfg: TrainConfig, device: torch.device, run_dir: Path | None):
        from distrl.envs.registry import get_task

        self.cfg, self.device, self.run_dir = cfg, device, run_dir
        self.suite = get_task(cfg.task).evaluation_suite  # (MT10's PPO task too)
        self.score_key = "eval/success" if self.suite is not None else "eval/return_mean"
        self.env: VecEnv | None = None
        self.suite_envs: dict[str, EpisodicVecEnv] = {}  # built at the first suite evaluation
        self.best: float | None = None
        self.last_iteration = -1

    def due(self, iteration: int) -> bool:
        interval = self.cfg.eval.interval
        if interval <= 0 or iteration == self.last_iteration:
            return False
        return iteration % interval == 0 or iteration >= self.cfg.agent.max_iterations

    def run(self, policy: ActorCritic) -> dict[str, Any]:
        """The eval/* metrics of the current policy (training mode and RNGs as they were)."""
        e = self.cfg.eval
        t0 = time.perf_counter()
        if self.suite is not None:
            with rng_untouched(), eval_mode(policy):
                tasks = self.suite.select(self.cfg.multitask.tasks)
                limit = e.max_episode_steps or self.cfg.env.max_episode_steps
                args = (e.episodes, self.device, e.num_envs, limit, e.seed, True, self.suite_envs)
                suite = evaluate_suite(policy, self.suite, tasks, *args)
            return suite.metrics() | {"eval/time": time.perf_counter() - t0}
        with rng_untouched(), eval_mode(policy):
            if self.env is None:
                self.env = task_env(self.cfg, min(e.episodes, e.num_envs), self.device)
            result = evaluate(policy, self.env, e.episodes, e.seed)
        return {
            "eval/return_mean": result.mean,
            "eval/return_std": result.std,
            "eval/length_mean": result.length_mean,
            "eval/time": time.perf_counter() - t0,
        }

    def improved(self, value: float) -> bool:
        """Whether ``value`` beats the best so far (read from best.pt after a resume)."""
        if self.best is None and self.run_dir is not None:
            self.best = best_score(self.run_dir / "checkpoints" / BEST)
        if self.best is not None and value <= self.best:
            return False
        self.best = value
        return True

    def close(self) -> None:
        for env in [self.env, *self.suite_envs.values()]:
            if env is not None:
                env.close()
        self.env, self.suite_envs = None, {}


BEST = "best.pt"


def best_score(path: Path) -> float | None:
    """The eval score a ``best.pt`` was kept for (``eval_score``; files from before suites were
    evaluated hold ``eval_return_mean``), or None when there is none (or it is not readable: a
    new best then replaces it)."""
    from distrl import checkpoint as ckpt

    if not path.is_file():
        return None
    try:
        manifest = ckpt.read_manifest(path)
    except ckpt.CheckpointError:
        return None
    value = manifest.get("eval_score", manifest.get("eval_return_mean"))
    return float(value) if value is not None else None


class EvalCallback(Hooks):
    """Every ``every`` iterations, on the main rank: the deterministic policy's ``episodes``
    episodes in an env of its own (``distrl.evaluation.Evaluator``: seeded ``seed``, the same
    episodes each time, training's RNG streams untouched), its figures added to that
    iteration's record (``eval/return_mean``, ``eval/return_std``, ``eval/length_mean``,
    ``eval/time``; an episodic suite: ``eval/success`` and per task); with ``target``, the run
    stops once the score (mean return, or the suite's success) reaches it.

    ``eval_freq`` (Stable-Baselines3's name) counts env steps instead of iterations: an
    evaluation at the first iteration whose env steps reach each multiple of it.

    ``last`` holds the newest evaluation's figures. It keeps no best checkpoint:
    ``--eval.interval`` does (``checkpoints/best.pt``)."""

    def __init__(
        self,
        every: int = 10,
        episodes: int = 10,
        target: float | None = None,
        seed: int = 12345,
        num_envs: int = 64,
        eval_freq: int | None = None,
    ):
        if every < 1 or episodes < 1 or num_envs < 1 or (eval_freq is not None and eval_freq < 1):
            raise ValueError(
                f"EvalCallback: every, episodes, num_envs and eval_freq must be at least 1, got "
                f"every={every}, episodes={episodes}, num_envs={num_envs}, eval_freq={eval_freq}"
            )
        self.every, self.episodes, self.target = every, episodes, target
        self.seed, self.num_envs, self.eval_freq = seed, num_envs, eval_freq
        self.evaluator: Evaluator | None = None
        self.last: dict[str, Any] = {}
        self._next_steps = eval_freq or 0

    def _due(self, runner: Runner) -> bool:
        if self.eval_freq is None:
            return runner.iteration % self.every == 0
        if runner.env_steps < self._next_steps:
            return False
        while self._next_steps <= runner.env_steps:
            self._next_steps += self.eval_freq
        return True

    def on_record(self, runner: Runner, record: dict[str, Any]) -> None:
        if not runner.strategy.is_main or not self._due(runner):
            return
        if self.evaluator is None:
            cfg = runner.cfg
            eval_cfg = dataclasses.replace(
                cfg.eval, episodes=self.episodes, seed=self.seed, num_envs=self.num_envs
            )
            device = next(runner.policy.parameters()).device
            self.evaluator = Evaluator(dataclasses.replace(cfg, eval=eval_cfg), device, None)
        ev = self.evaluator
        self.last = ev.run(runner.policy)
        record.update(self.last)
        score = self.last[ev.score_key]
        what = "success" if ev.suite is not None else "return"
        spread = "" if ev.suite is not None else f" ± {self.last['eval/return_std']:.2f}"
        runner.message(
            f"eval: iteration {runner.iteration} ({runner.env_steps} env steps), {what} "
            f"{score:.2f}{spread} over {self.episodes} episodes (seed {self.seed})"
        )
        if self.target is not None and score >= self.target:
            runner.request_stop(f"EvalCallback: eval {what} {score:.2f} >= target {self.target:g}")
        if runner.done or runner.stop_request is not None:
            self.close()

    def close(self) -> None:
        """Release the evaluation env (it is built again at the next evaluation)."""
        if self.evaluator is not None:
            self.evaluator.close()
            self.evaluator = None


class TrainingEvaluation(Hooks):
    """The evaluation during training, one path beside ``EvalCallback``: ``--eval.interval``
    (the eval/* metrics in the record when due, a new best kept as ``checkpoints/best.pt``) and
    ``--eval.video-interval`` (one deterministic episode filmed). Every runner puts it first
    among its hooks; it acts on the main rank only."""

    def __init__(self) -> None:
        self.evaluator: Evaluator | None = None  # built at the first due evaluation

    def on_record(self, runner: Runner, record: dict[str, Any]) -> None:
        if not runner.strategy.is_main:
            return
        if runner.cfg.eval.interval > 0:
            self._evaluate(runner, record)
        if runner.cfg.eval.video_interval > 0:
            self._film(runner, record)

    def _evaluate(self, runner: Runner, record: dict[str, Any]) -> None:
        """``--eval.interval``: add the eval/* metrics to ``record`` when due, and keep a new
        best as ``checkpoints/best.pt`` (``Evaluator``)."""
        from distrl import checkpoint
        from distrl.config import to_dict

        it = int(record.get("iteration", runner.iteration))
        if self.evaluator is None:
            device = next(runner.policy.parameters()).device
            self.evaluator = Evaluator(runner.cfg, device, runner.run_dir)
        ev = self.evaluator
        if not ev.due(it):
            return
        ev.last_iteration = it
        metrics = ev.run(runner.policy)
        record.update(metrics)
        score, e = metrics[ev.score_key], runner.cfg.eval
        if ev.suite is not None:
            what = f"held-out success {score:.3f} over {e.episodes} episodes per task"
        else:
            spread = metrics["eval/return_std"]
            what = f"return {score:.2f} ± {spread:.2f} over {e.episodes} episodes"
        text = f"eval: iteration {it}, {what} (seed {e.seed}, {metrics['eval/time']:.2f} s)"
        if ev.improved(score) and runner.run_dir is not None:
            state = {"policy": runner.policy.state_dict(), "iteration": it}
            state |= {"env_steps": runner.env_steps, "wall_time": runner.wall_time()}
            world = runner.strategy.world_size
            meta = checkpoint.run_metadata(to_dict(runner.cfg), world, runner.env_steps)
            meta |= {"eval_score": score, "eval_metric": ev.score_key, "policy_only": True}
            if ev.suite is None:
                meta["eval_return_mean"] = score
            where = runner.run_dir / "checkpoints"
            path = checkpoint.save_checkpoint(where, it, state, meta, name=BEST)
            text += f"; best so far, kept as {path}"
        runner.message(text)
        if it >= runner.cfg.agent.max_iterations:
            ev.close()

    def _film(self, runner: Runner, record: dict[str, Any]) -> None:
        """``--eval.video-interval``: film one deterministic episode when due, to
        RUN/videos/iteration_<k>.mp4; the record gets its path and return (eval/video,
        eval/video_return)."""
        it = int(record.get("iteration", runner.iteration))
        every, last = runner.cfg.eval.video_interval, runner.cfg.agent.max_iterations
        if runner.run_dir is None or (it % every != 0 and it < last):
            return
        path = runner.run_dir / "videos" / f"iteration_{it:08d}.mp4"
        device = next(runner.policy.parameters()).device
        try:
            with rng_untouched(), eval_mode(runner.policy):
                n, fps, ret = film(
                    runner.cfg.task,
                    runner.cfg.env.max_episode_steps,
                    device,
                    lambda env: runner.policy,
                    path,
                    runner.cfg.eval.seed,
                )
        except Exception as e:  # a video is never worth the run: say so, train on
            runner.message(f"video: iteration {it} not filmed ({type(e).__name__}: {e}); "
                           f"training goes on")  # fmt: skip
            return
        record["eval/video"], record["eval/video_return"] = str(path), ret
        runner.message(
            f"video: iteration {it}, {n} frames at {fps:g} fps, return {ret:.2f}: {path}"
        )
