"""The Python API: build a config, train, get the trained policy back.

    import distrl

    cfg = distrl.make_config("cartpole", agent={"max_iterations": 50}, seed=1)
    result = distrl.train(cfg)
    actions = result.policy.act_deterministic(obs)      # raw observations in, env actions out
    distrl.export(result.run_dir, "onnx")

The same script runs in one process (a notebook, ``python script.py``) and on N ranks under
``torchrun --nproc-per-node N script.py``: ``train`` joins the process group torchrun describes
and every rank returns a result (rank 0's is the one to save or export: ``result.is_main``).
``make_config(..., nproc=N)`` started from one process runs the ranks for you (built-in tasks;
a task or network registered in your script exists only in processes that run the script, so
start those with torchrun).

``train`` leaves the caller's process as it found it: the intra-op thread count, the CPU
affinity, the denormal mode and the global RNG states (torch, numpy, random) it changes for
training are put back when it returns or raises.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

import gymnasium
import torch
import yaml

from distrl import seeding
from distrl.config import TrainConfig, to_dict, validate
from distrl.evaluation import EvalResult
from distrl.policy.actor_critic import ActorCritic
from distrl.rundir import load_policy
from distrl.runner.hooks import Hooks

TaskLike: TypeAlias = (
    str
    | gymnasium.Env[Any, Any]
    | gymnasium.vector.VectorEnv[Any, Any, Any]
    | Callable[[], gymnasium.Env[Any, Any]]
)
"""A task as ``make_config`` and ``train`` take it: a task name (``"cartpole"``, ``distrl
list``), a registered Gymnasium id (``"CartPole-v1"``, task ``gym:CartPole-v1``), a run's
``config.yaml`` path (``make_config``, ``train``), a Gymnasium env instance (copies made from its
``env.spec``), a ``gymnasium.vector.VectorEnv`` (stepped as it is) or a factory of one env
(``registry.task_name`` says which task each becomes)."""


def make_config(task: TaskLike, *args: str, **overrides: Any) -> TrainConfig:
    """The task's tuned defaults, then ``args`` (command-line words, e.g.
    ``"--agent.max-iterations", "50"``), then ``overrides``: top-level fields by name, sections
    as dicts (``agent={"max_iterations": 50}``) or as config dataclasses. Validated: a bad
    value raises ValueError naming the field and the fix. ``task`` may also be the path of a
    run's ``config.yaml`` (see ``load_config``), or a Gymnasium env: its id, an instance, a
    ``gymnasium.vector.VectorEnv`` or a factory of one env (``registry.task_name``)."""
    from distrl.args import parse_train_args
    from distrl.envs.registry import task_name

    task = task_name(task)
    if overrides.get("algorithm") is not None:  # its defaults come before the other overrides
        args = ("--algorithm", str(overrides.pop("algorithm")), *args)
    with _process_state_restored():  # first use imports modules that draw from `random`
        if task.endswith((".yaml", ".yml")):
            cfg = parse_train_args(["--config", task, *args])
        else:
            cfg = parse_train_args([task, *args])
        return validate(_override(cfg, overrides, ""))


def load_config(path: str | Path) -> TrainConfig:
    """The config a run wrote (``RUN/config.yaml``), ready to train again: a new run directory,
    no resume, the process count it ran with. Unknown keys are refused, naming close ones."""
    from distrl.args import load_config_file

    return load_config_file(path)


def save(
    policy: ActorCritic,
    path: str | Path,
    config: TrainConfig,
    iteration: int = 0,
    env_steps: int = 0,
    world_size: int = 1,
) -> Path:
    """Write ``policy`` (trained with ``config``, which rebuilds its network) to ``path``
    (``*.pt``, added to a name without a suffix, as Stable-Baselines3 adds ``.zip``; its
    manifest ``*.json`` beside it): a policy-only checkpoint, written
    atomically with its sha256, that ``load_policy``, ``evaluate``, ``export``, ``distrl play``
    and ``--init-from`` read. Returns the path."""
    from distrl.rundir import save_policy

    return save_policy(policy, config, path, iteration, env_steps, world_size)


def evaluate(
    policy_or_run: ActorCritic | TrainResult | str | Path,
    episodes: int = 10,
    deterministic: bool = True,
    *,
    config: TrainConfig | str | None = None,
    seed: int = 12345,
    num_envs: int | None = None,
    device: str = "cpu",
) -> EvalResult:
    """Run ``episodes`` whole episodes of a policy in fresh envs of its task and return their
    returns and lengths (``.mean``, ``.std``, ``.returns``, ``.lengths``, ``.length_mean``;
    ``mean, std = evaluate(...)`` as Stable-Baselines3's ``evaluate_policy``).

    ``policy_or_run``: a run directory (its newest valid checkpoint), a checkpoint or saved
    policy file (loaded onto ``device``), a ``TrainResult``, or an ``ActorCritic`` with the
    ``config`` it was trained with (a ``TrainConfig``, or a task name for its defaults).
    ``deterministic``: the most likely action or the mean; False samples. The envs
    (``num_envs``, default min(episodes, 64)) are reset with ``seed``, and which episodes
    count is fixed before any runs (``distrl.evaluation``), as ``distrl play`` and
    ``--eval.interval`` count them."""
    from contextlib import closing

    from distrl.envs.registry import get_task
    from distrl.evaluation import eval_mode, task_env
    from distrl.evaluation import evaluate as run_episodes

    if isinstance(policy_or_run, str | Path):
        policy, cfg = load_policy(policy_or_run, device)
    elif isinstance(policy_or_run, TrainResult):
        if policy_or_run.policy is None:
            raise ValueError(f"rank {policy_or_run.rank} holds no policy; evaluate on rank 0")
        policy, cfg = policy_or_run.policy, policy_or_run.config
    elif config is None:
        raise ValueError(
            "evaluate(policy) needs the task it acts in: config=result.config (or the config "
            "load_policy returned), or config='<task>' for the task's defaults"
        )
    else:
        policy = policy_or_run
        cfg = make_config(config) if isinstance(config, str) else config
    if get_task(cfg.task).evaluation_suite is not None:
        raise ValueError(
            f"{cfg.task} is scored by its success per task from held-out init states, not by "
            f"returns: distrl play RUN_DIR (or distrl.evaluation.evaluate_suite)"
        )
    dev = next(policy.parameters()).device
    with closing(task_env(cfg, num_envs or min(episodes, 64), dev)) as env, eval_mode(policy):
        return run_episodes(policy, env, episodes, seed, deterministic=deterministic)


def _override(cfg: Any, overrides: dict[str, Any], prefix: str) -> Any:
    """``dataclasses.replace`` recursively: a dict for a section updates that section's
    fields; unknown names raise ValueError with close matches."""
    if not overrides:
        return cfg
    fields = {f.name: f for f in dataclasses.fields(cfg)}
    changes: dict[str, Any] = {}
    for name, value in overrides.items():
        if name not in fields:
            moved = _moved_keyword(cfg, name, value) if not prefix else None
            if moved is not None:
                raise ValueError(f"unknown config field {name!r}; {moved}")
            close = difflib.get_close_matches(name, list(fields), n=3)
            hint = f"; did you mean {', '.join(prefix + c for c in close)}?" if close else ""
            raise ValueError(
                f"unknown config field {prefix + name!r}{hint} (fields here: {', '.join(fields)})"
            )
        current = getattr(cfg, name)
        if dataclasses.is_dataclass(current) and isinstance(value, dict):
            value = _override(current, value, f"{prefix}{name}.")
        elif isinstance(value, list):
            value = tuple(value)
        changes[name] = value
    return dataclasses.replace(cfg, **changes)


_SB3_KEYWORDS: dict[str, tuple[str, str]] = {
    "n_envs": ("env.num_envs", ""),
    "n_steps": ("agent.num_steps", ""),
    "n_epochs": ("agent.num_epochs", ""),
    "clip_range": ("agent.clip_coef", ""),
    "batch_size": (
        "agent.num_minibatches",
        " (not a size: minibatches per epoch, each of num_envs x num_steps / num_minibatches "
        "samples)",
    ),
    "policy_kwargs": ("policy", " (distrl's own fields: actor_hidden, critic_hidden, activation)"),
    "tensorboard_log": ("run_dir", " (TensorBoard events go to the run directory)"),
    "verbose": ("progress", ""),
    "callback": ("hooks", " (an argument of train(): a list of distrl.Hooks)"),
}
"""Stable-Baselines3's keywords that distrl names otherwise: (distrl's field, a note). Those
with a note take another value than SB3's: the hint leaves the value to the user."""


def _moved_keyword(cfg: TrainConfig, name: str, value: Any) -> str | None:
    """Where a top-level keyword belongs, when it is Stable-Baselines3's name for a field or a
    field of a section (``total_timesteps`` -> ``agent={"total_timesteps": ...}``)."""
    if name in _SB3_KEYWORDS:
        target, note = _SB3_KEYWORDS[name]
        origin = "Stable-Baselines3's name"
    else:
        sections = [f.name for f in dataclasses.fields(cfg)]
        owners = [
            s for s in sections
            if dataclasses.is_dataclass(getattr(cfg, s))
            and name in {f.name for f in dataclasses.fields(getattr(cfg, s))}
        ]  # fmt: skip
        if not owners:
            return None
        target, note, origin = f"{owners[0]}.{name}", "", f"a field of section {owners[0]!r}"
    shown = ("{...}" if target == "policy" else "...") if note else repr(value)
    section, _, leaf = target.partition(".")
    spelled = f"{section}={{{leaf!r}: {shown}}}" if leaf else f"{section}={shown}"
    return f"{origin}: pass {spelled}{note}"


@dataclass
class TrainResult:
    """What ``train`` returns on every rank."""

    policy: ActorCritic | None
    """The trained policy (eval mode, CPU), from the run's final checkpoint; None on a rank
    that cannot read the run directory (another machine's disk)."""
    config: TrainConfig
    """The config the run trained with."""
    run_dir: Path
    """Where the run wrote config.yaml, metrics.jsonl, TensorBoard events and checkpoints."""
    checkpoint: Path | None
    """The final checkpoint the policy was loaded from."""
    metrics: dict[str, Any]
    """The run's final numbers (iteration, env steps, last return, time, ...); ``interrupted``:
    the signal (SIGINT, SIGTERM) that stopped it after a final checkpoint; ``stopped``: why it
    stopped before its last iteration (a hook's request, ``--agent.target-return``, a signal)."""
    rank: int = 0
    """This process's global rank (0 without torchrun)."""

    @property
    def is_main(self) -> bool:
        """True on rank 0, the one rank to save, print or export from."""
        return self.rank == 0

    def save(self, path: str | Path) -> Path:
        """The trained policy as one file that ``distrl.load_policy(path)`` reads back (see
        ``distrl.save``); returns its path."""
        from distrl.checkpoint import read_manifest

        if self.policy is None:
            raise ValueError(
                f"rank {self.rank} holds no policy ({self.run_dir} is not readable here); save "
                f"on the main rank: if result.is_main: result.save(path)"
            )
        world = read_manifest(self.checkpoint)["world_size"] if self.checkpoint else 1
        iteration, steps = self.metrics.get("iteration", 0), self.metrics.get("env_steps", 0)
        return save(self.policy, path, self.config, iteration, steps, world)


def train(
    cfg: TrainConfig | TaskLike | None = None, /, hooks: Sequence[Hooks] = (), **overrides: Any
) -> TrainResult:
    """Train ``cfg`` (a TrainConfig, a task name, a config.yaml path, or a Gymnasium env as
    ``make_config`` takes one; ``overrides`` as in ``make_config``) and return the trained
    policy with the run's numbers. ``hooks``
    (``distrl.Hooks``: callbacks around each update and after each iteration) are called by
    this process's runner, after the task's own (``register_task(..., hooks=)``).

    Under torchrun every rank calls this and joins the process group (``distributed`` is set
    for you). With ``nproc > 1`` outside torchrun, ``distrl train`` is started on that many
    ranks and the result read from its run directory. Bad configs raise ValueError before
    anything starts."""
    from distrl import session
    from distrl.distributed import launch
    from distrl.envs.registry import task_name

    if not isinstance(cfg, TrainConfig | str | None):  # a Gymnasium env: its task
        cfg = task_name(cfg)
    if cfg is None or isinstance(cfg, str):
        cfg = make_config(cfg or "cartpole", **overrides)
    elif overrides:
        cfg = validate(_override(cfg, overrides, ""))
    under_torchrun = launch.under_torchrun()
    if under_torchrun and not cfg.distributed:
        cfg = dataclasses.replace(cfg, distributed=True)
    if cfg.distributed and not under_torchrun:
        raise ValueError(
            "distributed=True but this process was not started by torchrun (no RANK/WORLD_SIZE "
            "in the environment); set nproc=N to start N ranks, or run the script with "
            "torchrun --nproc-per-node N"
        )
    if cfg.nnodes > 1:
        raise ValueError(
            f"nnodes={cfg.nnodes}: a run on several machines is started from the command line on "
            f"each of them (distrl train {cfg.task} --nnodes {cfg.nnodes} --node-rank K ...)"
        )
    with _process_state_restored():  # building the returned policy draws from the RNG too
        session.check_before_start(cfg)
        if cfg.nproc > 1 and not under_torchrun:
            if hooks:
                raise ValueError(
                    f"hooks= live in this process, and nproc={cfg.nproc} starts fresh ones; run "
                    f"the script on every rank instead: torchrun --nproc-per-node {cfg.nproc} "
                    f"script.py"
                )
            return _launch(cfg)
        final = session.run_training(cfg, hooks, in_caller=True)  # a 2nd Ctrl-C: an exception
        return _result(cfg, Path(final["run_dir"]), final)


def _launch(cfg: TrainConfig) -> TrainResult:
    """``nproc`` ranks of ``distrl train --config`` under torchrun, for a built-in task."""
    from distrl import args, interrupts
    from distrl.distributed import strategies
    from distrl.envs.registry import is_user_task
    from distrl.policy.networks import is_built_in

    own = [f"task {cfg.task!r}"] if is_user_task(cfg.task) else []
    if not is_built_in(cfg.policy.network):
        own.append(f"network {cfg.policy.network!r}")
    if own:
        raise ValueError(
            f"nproc={cfg.nproc} starts fresh processes, where the {' and the '.join(own)} "
            f"this script registered do not exist; run the script itself on every rank "
            f"instead: torchrun --nproc-per-node {cfg.nproc} script.py"
        )
    run_dir = Path(cfg.run_dir or args.default_run_dir(cfg.task))
    with tempfile.TemporaryDirectory(prefix="distrl-") as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False), encoding="utf-8")
        argv = ["train", "--config", str(path), "--distributed", "True", "--run-dir", str(run_dir)]
        # --config drops resume: pass it on; with restarts a restart continues, not starts over
        if cfg.resume is not None or cfg.max_restarts > 0:
            argv += ["--resume", cfg.resume or "auto"]
        start = strategies.launcher(cfg.dist.strategy)
        code = start(cfg.nproc, cfg.max_restarts, argv, cfg.stop_timeout, str(run_dir))
    # Ctrl-C or SIGTERM: the ranks stopped and saved (distrl.interrupts); say so, as one process
    interrupted = {interrupts.exit_code(s.name): s.name for s in interrupts.SIGNALS}.get(code)
    if code != 0 and interrupted is None:
        raise RuntimeError(f"distrl train on {cfg.nproc} ranks exited with code {code}")
    result = _result(cfg, run_dir, {})
    if interrupted:
        result.metrics["interrupted"] = interrupted
    return result


def _as_trained(cfg: TrainConfig, run_dir: Path) -> TrainConfig:
    """``cfg`` with the iterations the run trained for (``--agent.total-timesteps`` sets them
    from the collecting ranks), as its ``config.yaml`` says."""
    written = run_dir / "config.yaml"
    if not written.is_file():
        return cfg
    data = yaml.safe_load(written.read_text(encoding="utf-8")) or {}
    iterations = (data.get("agent") or {}).get("max_iterations")
    if not isinstance(iterations, int) or iterations == cfg.agent.max_iterations:
        return cfg
    return dataclasses.replace(cfg, agent=dataclasses.replace(cfg.agent, max_iterations=iterations))


def _result(cfg: TrainConfig, run_dir: Path, final: dict[str, Any]) -> TrainResult:
    from distrl.checkpoint import find_latest_valid

    rank = int(os.environ.get("RANK", "0"))
    path = find_latest_valid(run_dir / "checkpoints")[0] if run_dir.exists() else None
    policy = load_policy(path)[0] if path is not None else None
    metrics = {k: v for k, v in final.items() if k != "run_dir"}
    cfg = _as_trained(cfg, run_dir)
    if not metrics:  # launched: the ranks' numbers are in the run's metrics file
        from distrl.telemetry import read_metrics

        records = read_metrics(run_dir / "metrics.jsonl") if run_dir.exists() else []
        metrics = dict(records[-1]) if records else {}
    return TrainResult(policy, cfg, run_dir, path, metrics, rank)


def _flush_denormal() -> bool:
    """Whether this thread flushes denormals to zero now (torch has a setter, no getter)."""
    return float(torch.tensor([1e-39]) * 1.0) == 0.0


class _process_state_restored:
    """Put back what training changes in the calling process (see the module docstring)."""

    def __enter__(self) -> None:
        self.threads = torch.get_num_threads()
        self.affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
        self.denormal = _flush_denormal()
        self.rng = seeding.host_rng()

    def __exit__(self, *exc: object) -> None:
        torch.set_num_threads(self.threads)
        if self.affinity is not None:
            os.sched_setaffinity(0, self.affinity)
        torch.set_flush_denormal(self.denormal)
        seeding.set_host_rng(self.rng)
