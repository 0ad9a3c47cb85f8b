"""A training session: the checks of a config against the world, then one rank's whole life.

``check_before_start`` refuses what cannot run before torchrun, a process group or a run
directory exists; ``run_training`` builds and runs one rank of the run (process group,
strategy, env, the algorithm's runner, telemetry) and tears it down on any exit. ``distrl
train`` (``cli.py``) and ``distrl.train`` (``api.py``) both call these two; the run directory
is read through ``rundir.py``, which option goes with which algorithm and strategy is decided by
the two registries (``runner/algorithms.check_compatible``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from distrl import checkpoint as ckpt
from distrl import interrupts, startup
from distrl.args import IMPORTED, default_run_dir
from distrl.config import TrainConfig, to_dict
from distrl.rundir import (
    LOCK_HOLDER_ENV,
    RunLock,
    check_run_dir_free,
    check_unlocked,
    init_policy,
)

if TYPE_CHECKING:
    from distrl.envs.core import VecEnv
    from distrl.runner.hooks import Hooks


def check_before_start(cfg: TrainConfig) -> None:
    """Refuse what cannot run before torchrun, a process group or a run directory exists.

    ``validate`` checks the config's own fields; this checks them against the world outside it:
    torchrun's environment against ``--distributed``, the device and backend, the task's extra
    and Gymnasium spaces, the algorithm and strategy (and the options only one of them reads),
    the network, wandb, the run directory (a run already there needs ``--resume``), and the
    ``--resume`` target (it exists; in the launcher and a single process also that its
    checkpoint is compatible with this config and world size). Inside a torchrun rank the
    run-directory and checkpoint checks are left to the launcher and to rank 0's
    ``run_training`` (an elastic restart re-enters the same run directory on purpose).
    Raises ValueError (``CheckpointError`` is one) naming the problem and the fix.
    """
    from distrl.distributed import context, launch
    from distrl.envs.registry import check_config, get_task
    from distrl.policy.networks import check_network
    from distrl.runner.algorithms import check_compatible

    check_launch_mode(cfg)
    launching = (cfg.nproc > 1 or cfg.nnodes > 1) and not launch.under_torchrun()
    _, _, world, local_world = context.env_ranks() if cfg.distributed else (0, 0, 1, 1)
    if launching:
        world, local_world = cfg.nnodes * cfg.nproc, cfg.nproc
        launch.check_memory(cfg.nproc)
    context.check_devices(cfg.device, local_world)
    context.check_backend(cfg.dist.backend, cfg.device, local_world)
    task = get_task(cfg.task)
    if task.preflight is not None:
        task.preflight()
    check_config(cfg)
    algorithm = check_compatible(cfg, world)  # option x algorithm x strategy, the world size
    if algorithm.check_env is not None:  # one env of the task says it before anything starts
        from distrl.envs.registry import make_env

        one = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, num_envs=1))
        env = make_env(one, "cpu")
        try:
            algorithm.check_env(cfg, env)
        finally:
            env.close()
    if task.suite is not None:
        task.suite.select(cfg.multitask.tasks)
    check_network(cfg.policy.network)
    if cfg.wandb:
        import importlib.util

        from distrl.telemetry import WANDB_MISSING

        if importlib.util.find_spec("wandb") is None:
            raise ValueError(WANDB_MISSING)
    if cfg.eval.video_interval > 0:
        from distrl.render import check_filmable

        check_filmable(cfg.task)
    # node 0 writes the run (on several machines, the others' run directory matters only if
    # the writer's role reaches them: docs/training.md)
    writes = not launch.under_torchrun() and cfg.node_rank == 0
    if cfg.run_dir is not None and writes:  # a live run is named first: it may hold a run
        check_unlocked(cfg.run_dir)
    if cfg.resume is None and writes:
        check_run_dir_free(cfg.run_dir)
    if cfg.multitask.demos is not None:
        from distrl.demos import load_demos

        demos = load_demos(cfg.multitask.demos)
        if demos["suite"] != cfg.task:
            raise ValueError(
                f"--multitask.demos {cfg.multitask.demos} holds {demos['suite']} demonstrations, "
                f"not {cfg.task}; record some with: distrl demos {cfg.task} --out FILE"
            )
        assert task.suite is not None  # check_compatible: only the suites read it
        if not set(task.suite.select(cfg.multitask.tasks)) & set(demos["tasks"]):
            raise ValueError(
                f"--multitask.demos {cfg.multitask.demos} holds none of the trained tasks (it "
                f"has {', '.join(demos['tasks'])}); record them with distrl demos {cfg.task}"
            )
    if cfg.init_from is not None:
        init_policy(cfg)  # the file and its policy's fit, checked (and read) before any start
    if cfg.resume is None:
        return
    if cfg.resume == "auto":
        if cfg.run_dir is None:
            if launching:
                return  # the launcher gives the first start and every restart one new run dir
            raise ValueError(
                "--resume auto needs --run-dir: the default run directory is new on every start, "
                "so there is nothing to resume; pass the run directory, e.g. --run-dir runs/x"
            )
    elif not Path(cfg.resume).expanduser().exists():
        raise ValueError(
            f"--resume {cfg.resume}: path does not exist; pass a checkpoint file (ckpt_*.pt), a "
            f"run directory, or --resume auto with --run-dir"
        )
    if launch.under_torchrun():
        return
    path, _ = ckpt.resolve_resume(cfg.resume, Path(cfg.run_dir) if cfg.run_dir else None)
    if path is not None:
        ckpt.check_resume_compatible(ckpt.read_manifest(path), to_dict(cfg), world)


def check_launch_mode(cfg: TrainConfig) -> None:
    """``--distributed`` must say what started this process: torchrun with several ranks needs
    it (without, every rank would train alone into the same run directory), and without
    torchrun there is no process group to join (``--nproc N`` starts one)."""
    from distrl.distributed import context, launch

    if launch.under_torchrun():
        world = context.env_ranks()[2]
        if world > 1 and not cfg.distributed:
            raise ValueError(
                f"this process was started by torchrun (WORLD_SIZE={world}) but --distributed is "
                f"False: every rank would train alone into the same run directory; add "
                f"--distributed True, or let distrl start the ranks: distrl train {cfg.task} "
                f"--nproc {world}"
            )
    elif cfg.distributed and cfg.nproc == 1:
        raise ValueError(
            "--distributed True joins the process group of a torchrun launch, but this process "
            "was not started by torchrun (no RANK/WORLD_SIZE/LOCAL_RANK in the environment); "
            f"use distrl train {cfg.task} --nproc N to start N ranks, or torchrun "
            "--nproc_per_node=N --no_python distrl train ... --distributed True"
        )


def run_training(cfg: TrainConfig, hooks: Sequence[Hooks] = (), in_caller: bool = False) -> dict:
    """One rank's whole life: process group, env, runner, telemetry; torn down on any exit.
    The runner calls the task's hooks (``register_task(..., hooks=)``), then ``hooks``.

    SIGINT and SIGTERM stop it at an iteration boundary every rank agrees on, after one final
    checkpoint (``distrl.interrupts``); the result then holds ``interrupted`` (the signal's
    name) and the main rank has printed one line saying how to resume. A run that stops early
    for any reason (a hook's ``request_stop``, ``--agent.target-return``) holds ``stopped``,
    the reason."""
    with interrupts.handling(owner=not cfg.distributed, in_caller=in_caller):
        return _run_training(cfg, hooks)


def _run_training(cfg: TrainConfig, hooks: Sequence[Hooks]) -> dict:
    from distrl.distributed import context, liveness
    from distrl.distributed.strategies import make_strategy
    from distrl.envs.registry import get_task, make_env
    from distrl.runner.algorithms import check_compatible
    from distrl.runner.base import Runner
    from distrl.telemetry import Telemetry

    task = get_task(cfg.task)
    all_hooks = [*task.hooks, *hooks]
    if cfg.eval.video_interval > 0:  # before anything imports mujoco
        from distrl.render import headless_gl

        headless_gl()
    ctx = context.init(cfg)
    clean = lost = False
    lock: RunLock | None = None
    env: VecEnv | None = None
    close: Callable[[], None] | None = None
    try:
        algorithm = check_compatible(cfg, ctx.world_size if ctx.distributed else 1)
        strategy = make_strategy(cfg, ctx)
        startup.mark("ranks")
        cfg = cfg.with_budget(strategy.num_collectors)  # --agent.total-timesteps, if set
        chosen = cfg.run_dir or (str(default_run_dir(cfg.task)) if strategy.is_main else None)
        run_dir = Path(strategy.broadcast_object(chosen))
        if strategy.is_main:  # held until this process ends: a second run here is refused
            lock = RunLock(run_dir, launcher=os.environ.get(LOCK_HOLDER_ENV))
        resume_path: Path | None = None
        skipped: list[tuple[Path, str]] = []
        if cfg.resume:
            # Rank 0 picks the checkpoint; every rank loads that one.
            choice = None
            if ctx.is_main:
                try:
                    p, skipped = ckpt.resolve_resume(cfg.resume, run_dir)
                    choice = ("ok", str(p) if p else None)
                except ckpt.CheckpointError as e:
                    choice = ("error", str(e))
            kind, value = strategy.broadcast_object(choice)
            if kind == "error":
                raise ckpt.CheckpointError(None, value)
            resume_path = Path(value) if value else None
        env = None if algorithm.on_suite else make_env(cfg, ctx.device)
        startup.mark("env")
        # config.yaml repeats the run (`train --config`): with the local process count the
        # launcher started, which the ranks' own --nproc (always 1) does not say, and the
        # learning rate as given (a repeat scales it again for its own world)
        written = dataclasses.replace(cfg, nproc=max(cfg.nproc, ctx.local_world_size))
        cfg = cfg.with_lr_scaling(strategy.num_collectors)

        def sinks(enabled: bool, start: int = 0) -> Telemetry:
            return Telemetry.create(
                run_dir,
                to_dict(written),
                total_iterations=cfg.agent.max_iterations,
                start_iteration=start,
                tensorboard=cfg.tensorboard,
                wandb=cfg.wandb,
                wandb_project=cfg.wandb_project,
                wandb_entity=cfg.wandb_entity,
                progress=cfg.progress,
                enabled=enabled,
            )

        with sinks(strategy.is_main) as tel:
            startup.mark("telemetry")
            runner: Runner = algorithm.build(
                cfg, strategy, task, env, ctx.device, tel, run_dir, all_hooks
            )

            def take_over() -> Telemetry:
                """A strategy that survives a lost writer (elastic) hands the writing here:
                the lost writer's lock went with it; this process holds it from now on."""
                nonlocal lock
                with contextlib.suppress(ValueError):  # (another live holder: keep going)
                    lock = lock or RunLock(run_dir, launcher=os.environ.get(LOCK_HOLDER_ENV))
                return sinks(True, runner.iteration)

            runner.open_sinks = take_over
            close = runner.close
            tel.message(
                f"distrl: task {cfg.task} ({algorithm.name}) | {ctx.world_size} rank(s) x "
                f"{cfg.env.num_envs} envs on {ctx.device} ({ctx.backend or 'single process'}, "
                f"strategy {strategy.name}) | run dir {run_dir}"
            )
            groups = getattr(env, "policy_groups", ())
            if len(groups) > 1:  # a multi-agent task's agent groups, and who acts for them
                who = "a policy each" if cfg.policy.mapping == "per-group" else "one policy"
                tel.message(f"agents: groups {', '.join(groups)}, {who} (--policy.mapping)")
            tree = getattr(strategy, "tree", None)  # a parameter server's sink nodes
            if tree is not None and tree.sinks:
                tel.message(f"{strategy.name}: {tree.describe()}")
            if cfg.dist.lr_scaling != "none" and strategy.num_collectors > 1:
                tel.message(
                    f"lr: {written.agent.learning_rate:g} x {cfg.dist.lr_scaling}("
                    f"{strategy.num_collectors} collecting ranks) = {cfg.agent.learning_rate:g} "
                    "(--dist.lr-scaling)"
                )
            if cfg.agent.lr_schedule == "adaptive":  # not Stable-Baselines3's constant: say so
                a = cfg.agent
                tel.message(
                    f"lr: {a.learning_rate:g} moves with the KL (--agent.lr-schedule adaptive: "
                    f"x1.5 or /1.5 per minibatch towards --agent.desired-kl {a.desired_kl:g}, "
                    f"within [{a.lr_min:g}, {a.lr_max:g}]); --agent.lr-schedule constant keeps it"
                )
            if strategy.is_main:  # before any save of this run: what a killed save left behind
                for stale in ckpt.remove_stale_temporaries(run_dir / "checkpoints"):
                    tel.message(f"checkpoint: removed {stale.name}, left by an interrupted save")
            for path, reason in skipped:
                tel.message(f"resume: skipped {path}: {reason}")
            if cfg.init_from is not None and cfg.init_normalizer == "frozen":
                runner.policy.normalizer.frozen = True  # after a restart's resume as well
            if resume_path is not None:
                notes = runner.load(resume_path)
                tel.message(f"resume: loaded {resume_path} at iteration {runner.iteration}")
                for note in notes:
                    tel.message(f"resume: changed {note}")
            elif cfg.init_from is not None:
                state, path, at = init_policy(cfg)
                runner.policy.load_state_dict(state)  # every rank reads the same file
                tel.message(f"init: policy from {path} (its iteration {at}); iteration 0 here")
            elif cfg.resume:
                tel.message("resume: no checkpoint yet in this run directory; starting fresh")
            if runner.iteration >= cfg.agent.last_iteration:
                flag = (
                    "max-iterations"
                    if cfg.agent.last_iteration == cfg.agent.max_iterations
                    else "stop-at"
                )
                tel.message(
                    f"resume: the checkpoint is already at iteration {runner.iteration}, and "
                    f"--agent.{flag} is {cfg.agent.last_iteration}: nothing to train. "
                    f"Raise --agent.{flag} to train further."
                )
                tel.close()
                close()
                clean = True
                return {
                    "iteration": runner.iteration,
                    "env_steps": runner.env_steps,
                    "run_dir": str(run_dir),
                }
            tel.start_iteration = runner.iteration
            startup.mark("runner")
            final = {**runner.learn(), "run_dir": str(run_dir)}
            if runner.tel is not tel:  # this process took the writing over mid-run
                runner.tel.summary(final)
                runner.tel.close()
            stopped = runner.stop_reason  # an interrupt, a hook's request, a target reached
            if stopped is not None:
                final["stopped"] = stopped
            tel.summary(final)
            if interrupts.is_signal(strategy.interrupt):  # agreed: a final checkpoint written
                final["interrupted"] = interrupts.name(strategy.interrupt)
                if strategy.is_main:  # (none written here when the save was refused: the newest)
                    at, saved = runner.iteration, runner.last_checkpoint
                    saved = saved or ckpt.find_latest_valid(run_dir / "checkpoints")[0]
                    line = interrupts.final_line(strategy.interrupt, at, saved, run_dir, IMPORTED)
                    tel.message(line)
        close()
        clean = True
        return final
    except liveness.PeerFailure:
        lost = True
        raise
    finally:
        if not clean:  # stopped by an error: the envs close (AsyncVectorEnv subprocesses end)
            closer = close if close is not None else env.close if env is not None else None
            if closer is not None:
                with contextlib.suppress(Exception):
                    closer()
        if lock is not None:
            lock.release()
        context.shutdown(clean, peer_lost=lost)
