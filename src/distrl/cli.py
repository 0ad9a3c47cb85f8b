"""Command line: `distrl train|play|export|average|demos|pretrain|bench|list`, and `train` /
`play` as their own scripts.

`train <task> [overrides]` is parsed in two steps (as mjlab does): the task name selects the
task's tuned default config, then tyro parses the overrides on top of it, e.g.

    train cartpole --env.num-envs 4096 --agent.max-iterations 10_000 --seed 3
    torchrun --nproc_per_node=2 --no_python train cartpole --distributed True
    distrl train cartpole --nproc 2          # starts torchrun for you
"""

from __future__ import annotations

import dataclasses
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import tyro

from distrl.args import default_run_dir, parse_train_args  # noqa: F401 (this module's API)
from distrl.config import TrainConfig, to_dict

if TYPE_CHECKING:
    from distrl.runner.hooks import Hooks

USAGE = """usage: distrl <command> ...

commands:
  train <task> [overrides]    train a policy (`distrl train <task> --help` lists overrides)
  train --config RUN/config.yaml [overrides]
                              train again with a run's config
  train --import MODULE <task> [overrides]
                              import MODULE first (in every rank too): your own
                              tasks, registered with distrl.register_task
  play <run-dir|checkpoint>   run the deterministic policy and print mean ± std return;
                              --video out.mp4 records one episode
  export <run-dir|checkpoint> [--format onnx|torchscript] [--output FILE]
                              the deterministic actor, normalizer baked in, checked
                              against the checkpoint (docs/export.md)
  average <run-dir> [--from-iteration N] [--to-iteration M] [--output FILE]
                              the mean of the policy weights over the run's last
                              checkpoints (default: its last third), policy only
  demos <suite> --per-task N [--out FILE]
                              scripted-expert demonstrations of an episodic suite
  pretrain <suite> --demos FILE [-- train overrides]
                              behaviour cloning from demonstrations: RUN/checkpoints/bc.pt
                              for train <suite> --init-from
  bench <what> [options]      measure throughput, time to solve, scaling (`distrl bench --help`)
  list                        every task with a one-line description
"""


def _fail(msg: str, code: int = 2) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return code


def check_before_start(cfg: TrainConfig) -> None:
    """Refuse what cannot run before torchrun, a process group or a run directory exists.

    ``validate`` checks the config's own fields; this checks them against the world outside it:
    torchrun's environment against ``--distributed``, the device and backend, the task's extra
    and Gymnasium spaces, the network, wandb, the run directory (a run already there needs
    ``--resume``), and the ``--resume`` target (it exists; in the launcher and a single process
    also that its checkpoint is compatible with this config and world size). Inside a torchrun
    rank the run-directory and checkpoint checks are left to the launcher and to rank 0's
    ``run_training`` (an elastic restart re-enters the same run directory on purpose).
    Raises ValueError (``CheckpointError`` is one) naming the problem and the fix.
    """
    from distrl import checkpoint as ckpt
    from distrl.distributed import context, launch

    check_launch_mode(cfg)
    launching = cfg.nproc > 1 and not launch.under_torchrun()
    _, _, world, local_world = context.env_ranks() if cfg.distributed else (0, 0, 1, 1)
    if launching:
        world = local_world = cfg.nproc
    context.check_devices(cfg.device, local_world)
    context.check_backend(cfg.dist.backend, cfg.device, local_world)
    from distrl.distributed.strategies import check_strategy
    from distrl.envs.registry import get_task
    from distrl.policy.networks import check_network

    task = get_task(cfg.task)
    episodic = task.suite is not None
    if task.preflight is not None:
        task.preflight()
    if task.suite is not None:
        task.suite.select(cfg.multitask.tasks)
    elif cfg.multitask.tasks:
        raise ValueError(
            f"--multitask.tasks applies to the episodic suites (reach10, metaworld-mt10), not to "
            f"{cfg.task}; drop it, or train a suite: distrl train reach10 --multitask.tasks ..."
        )
    if cfg.multitask.noise_beta and not episodic:
        raise ValueError(
            f"--multitask.noise-beta applies to the episodic suites (reach10, metaworld-mt10), "
            f"not to {cfg.task}; drop it"
        )
    if cfg.multitask.skip_solved is not None and cfg.dist.strategy in ("ps-asp", "ps-bap"):
        raise ValueError(
            f"--multitask.skip-solved needs every rank to agree on the tasks' success, which "
            f"--dist.strategy {cfg.dist.strategy} does not give its workers; use allreduce or "
            f"ps-bsp, or drop it"
        )
    check_network(cfg.policy.network)
    check_strategy(cfg, world, episodic)
    if cfg.wandb:
        import importlib.util

        from distrl.telemetry import WANDB_MISSING

        if importlib.util.find_spec("wandb") is None:
            raise ValueError(WANDB_MISSING)
    if cfg.resume is None and not launch.under_torchrun():
        check_run_dir_free(cfg.run_dir)
    if cfg.agent.total_timesteps is not None and episodic:
        raise ValueError(
            f"--agent.total-timesteps does not apply to {cfg.task}: its episodic RLOO runner "
            f"collects whole episodes of varying length; use --agent.max-iterations"
        )
    if cfg.policy.reward_normalization and episodic:
        raise ValueError(
            f"--policy.reward-normalization does not apply to {cfg.task}: its episodic RLOO "
            f"runner scores whole episodes; leave it off"
        )
    if cfg.policy.popart_tasks and episodic:
        raise ValueError(
            f"--policy.popart-tasks does not apply to {cfg.task}: its episodic RLOO runner "
            f"has no critic (RLOO's baseline is the group's other episodes); leave it at 0"
        )
    if cfg.multitask.demos is not None:
        if not episodic:
            raise ValueError(
                f"--multitask.demos applies to the episodic suites (reach10, metaworld-mt10), "
                f"not to {cfg.task}; drop it"
            )
        from distrl.demos import load_demos

        demos = load_demos(cfg.multitask.demos)
        if demos["suite"] != cfg.task:
            raise ValueError(
                f"--multitask.demos {cfg.multitask.demos} holds {demos['suite']} demonstrations, "
                f"not {cfg.task}; record some with: distrl demos {cfg.task} --out FILE"
            )
        assert task.suite is not None
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


def check_run_dir_free(run_dir: str | None) -> None:
    """Refuse to start a new run in a directory that already holds one (metrics or
    checkpoints): its metrics would be appended to the old ones and its checkpoints mixed with
    theirs. An absent or empty directory, or one with neither, is free."""
    from distrl import checkpoint as ckpt
    from distrl.telemetry import METRICS_FILE, read_metrics

    if run_dir is None:
        return
    path = Path(run_dir).expanduser()
    if path.exists() and not path.is_dir():
        raise ValueError(f"--run-dir {run_dir} is a file; pass a directory (new or empty)")
    metrics = path / METRICS_FILE
    checkpoints = ckpt.list_checkpoints(path / "checkpoints")
    if not checkpoints and not (metrics.is_file() and metrics.stat().st_size > 0):
        return
    iterations = [ckpt.checkpoint_iteration(p) or 0 for p in checkpoints[:1]]
    if metrics.is_file():
        records = read_metrics(metrics)
        iterations += [r["iteration"] for r in records if isinstance(r.get("iteration"), int)]
    at = f"iteration {max(iterations)}" if iterations else "no iteration finished"
    raise ValueError(
        f"run dir {run_dir} already holds a run ({at}); pass --resume auto to continue it or "
        f"choose a new --run-dir"
    )


def init_policy(cfg: TrainConfig) -> tuple[dict, Path, int]:
    """``--init-from``: (policy state, checkpoint, its iteration), refused with the fix when the
    checkpoint's task or policy settings differ from this run's (its weights would not fit)."""
    import torch

    from distrl.play import load

    src = Path(cfg.init_from or "").expanduser()
    if not src.exists():
        raise ValueError(f"--init-from {cfg.init_from}: no such run directory or checkpoint file")
    theirs, state, path, manifest = load(str(src), torch.device("cpu"))
    mine = to_dict(cfg)
    if theirs.task != cfg.task:
        raise ValueError(
            f"--init-from {path}: its task is {theirs.task}, this run's {cfg.task}; a policy "
            f"fits only the observations and actions of its own task"
        )
    ours, other = mine["policy"], to_dict(theirs)["policy"]
    differ = [f"--policy.{k.replace('_', '-')} {other.get(k)} there, {v} here"
              for k, v in ours.items() if other.get(k) != v]  # fmt: skip
    if differ:
        raise ValueError(
            f"--init-from {path}: the policy differs ({'; '.join(differ)}); pass that run's "
            f"--policy settings"
        )
    return state, path, int(manifest["iteration"])


def run_training(cfg: TrainConfig, hooks: Sequence[Hooks] = ()) -> dict:
    """One rank's whole life: process group, env, runner, telemetry; torn down on any exit.
    The runner calls the task's hooks (``register_task(..., hooks=)``), then ``hooks``."""
    from distrl import checkpoint as ckpt
    from distrl.distributed import context
    from distrl.distributed.strategies import make_strategy
    from distrl.envs.registry import get_task, make_env
    from distrl.runner.base import Runner
    from distrl.runner.episodic import EpisodicRunner
    from distrl.runner.on_policy import OnPolicyRunner
    from distrl.telemetry import Telemetry

    task = get_task(cfg.task)
    suite = task.suite  # episodic suites train with the RLOO runner
    all_hooks = [*task.hooks, *hooks]
    ctx = context.init(cfg)
    clean = lost = False
    try:
        strategy = make_strategy(cfg, ctx, episodic=suite is not None)
        cfg = cfg.with_budget(strategy.num_collectors)  # --agent.total-timesteps, if set
        run_dir = Path(strategy.broadcast_object(str(cfg.run_dir or default_run_dir(cfg.task))))
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
        env = None if suite else make_env(cfg, ctx.device)
        # config.yaml repeats the run (`train --config`): with the local process count the
        # launcher started, which the ranks' own --nproc (always 1) does not say
        written = dataclasses.replace(cfg, nproc=max(cfg.nproc, ctx.local_world_size))
        with Telemetry.create(
            run_dir,
            to_dict(written),
            total_iterations=cfg.agent.max_iterations,
            tensorboard=cfg.tensorboard,
            wandb=cfg.wandb,
            wandb_project=cfg.wandb_project,
            wandb_entity=cfg.wandb_entity,
            progress=cfg.progress,
            enabled=ctx.is_main,
        ) as tel:
            runner: Runner
            if suite:
                runner = EpisodicRunner(
                    cfg, strategy, suite, ctx.device, tel, run_dir, hooks=all_hooks
                )
            else:
                assert env is not None
                runner = OnPolicyRunner(cfg, strategy, env, tel, run_dir, hooks=all_hooks)
            close = runner.close
            tel.message(
                f"distrl: task {cfg.task} | {ctx.world_size} rank(s) x {cfg.env.num_envs} envs "
                f"on {ctx.device} ({ctx.backend or 'single process'}, strategy "
                f"{strategy.name}) | run dir {run_dir}"
            )
            if ctx.is_main:  # before any save of this run: what a killed save left behind
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
            if runner.iteration >= cfg.agent.max_iterations:
                tel.message(
                    f"resume: the checkpoint is already at iteration {runner.iteration}, and "
                    f"--agent.max-iterations is {cfg.agent.max_iterations}: nothing to train. "
                    f"Raise --agent.max-iterations to train further."
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
            final = {**runner.learn(), "run_dir": str(run_dir)}
            tel.summary(final)
        close()
        clean = True
        return final
    except context.PeerFailure:
        lost = True
        raise
    finally:
        context.shutdown(clean, peer_lost=lost)


def train_main(argv: list[str] | None = None) -> int:
    from distrl.distributed import launch

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        cfg = parse_train_args(argv)
        check_before_start(cfg)
    except ValueError as e:
        return _fail(str(e))
    if cfg.nproc > 1 and not launch.under_torchrun():
        run_dir = cfg.run_dir or str(default_run_dir(cfg.task))
        # Launcher flags do not reach the ranks: torchrun's own parser would take `--nproc` as an
        # abbreviation of its --nproc-per-node. The world size is in every checkpoint manifest.
        args = launch.strip_launch_flags(argv)
        args = ["train", *args, "--distributed", "True", "--run-dir", run_dir]
        if cfg.max_restarts > 0 and cfg.resume is None:  # a restart continues, not starts over
            args += ["--resume", "auto"]
        return launch.launch(cfg.nproc, cfg.max_restarts, args)
    if not launch.under_torchrun():
        run_training(cfg)
        return 0
    # A rank leaves with os._exit, skipping the C++ destructors of interpreter teardown: under
    # load a finished rank was seen to abort there (SIGABRT, "terminate called without an
    # active exception"), turning a finished run into a failed one for torchrun; and with a
    # peer lost, the process group's teardown can block on that peer or abort. Every file is
    # closed and fsynced by then.
    from distrl.distributed import context

    code = 0
    try:
        run_training(cfg)
    except (Exception, KeyboardInterrupt) as e:
        rank = int(os.environ.get("RANK", "0"))
        why = context.dropped_reason(rank) if isinstance(e, context.PeerFailure) else None
        if why is not None:  # the run goes on without this rank: leave quietly, exit 0
            print(f"rank {rank}: dropped from the run ({why}); leaving", file=sys.stderr)
            context.mark_left(rank)
        else:
            traceback.print_exc()
            code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def play_main(argv: list[str] | None = None) -> int:
    from distrl.play import PlayArgs, play
    from distrl.render import RenderUnavailable

    argv = list(sys.argv[1:] if argv is None else argv)
    args = tyro.cli(PlayArgs, args=argv, prog="play")
    try:
        play(args)
    except (ValueError, ImportError, RenderUnavailable) as e:  # each names its fix
        return _fail(str(e))
    return 0


def export_main(argv: list[str]) -> int:
    from distrl.exporting import ExportArgs, ParityError, describe, export_policy

    args = tyro.cli(ExportArgs, args=argv, prog="distrl export")
    try:
        result = export_policy(args.path, args.format, args.output, check=args.check)
    except ParityError as e:  # a file was made and disagreed: a failure, not a usage mistake
        return _fail(str(e), 1)
    except ValueError as e:  # ExportError and the checkpoint's own errors name their fix
        return _fail(str(e))
    print(describe(result))
    return 0


def average_main(argv: list[str]) -> int:
    from distrl import averaging

    args = tyro.cli(averaging.AverageArgs, args=argv, prog="distrl average")
    try:
        result = averaging.average(args.paths, args.from_iteration, args.to_iteration, args.output)
    except ValueError as e:  # each names its fix (CheckpointError too)
        return _fail(str(e))
    print(averaging.describe(result))
    return 0


def demos_main(argv: list[str]) -> int:
    from distrl import demos

    args = tyro.cli(demos.DemosArgs, args=argv, prog="distrl demos")
    try:
        demos.demos_main(args)
    except (ValueError, ImportError) as e:  # each names its fix
        return _fail(str(e))
    return 0


def pretrain_main(argv: list[str]) -> int:
    from distrl.distributed import launch
    from distrl.pretrain import PretrainArgs, pretrain

    own, overrides = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv \
        else (argv, [])  # fmt: skip
    args = tyro.cli(PretrainArgs, args=own, prog="distrl pretrain")
    ranked = launch.under_torchrun()
    try:
        pretrain(args, overrides)
        code = 0
    except (ValueError, ImportError) as e:  # each names its fix
        code = _fail(str(e))
    except RuntimeError as e:  # the ranks failed (each printed its own error) or a peer died
        code = _fail(str(e), 1)
    if ranked:  # a rank leaves as a training rank does (train_main): files are closed by now
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def list_main() -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from distrl.envs.registry import list_tasks

    table = Table("task", "description", title="distrl tasks", title_justify="left")
    for t in list_tasks():
        # escape: "pip install 'distrl[mujoco]'" would otherwise lose "[mujoco]" as markup
        table.add_row(escape(t.name), escape(t.description))
    Console().print(table)
    print("Any Gymnasium id works as gym:<Id> (MuJoCo tasks need: pip install -e '.[mujoco]').")
    return 0


def bench_main(argv: list[str]) -> int:
    """`distrl bench`: the benchmarks are the repository's top-level ``benchmarks`` package,
    beside ``src/``, not part of the installed package; they run from a checkout (an editable
    install). The checkout's root goes first on the path, here and for the benchmarks'
    subprocesses."""
    import importlib

    root = Path(__file__).resolve().parents[2]
    if not (root / "benchmarks" / "cli.py").is_file():
        return _fail(
            "`distrl bench` runs the benchmarks of a source checkout (benchmarks/ beside src/), "
            "which this install does not have: git clone the repository, pip install -e it, and "
            "run `distrl bench` from there"
        )
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(root) not in path:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(root), *path])
    return int(importlib.import_module("benchmarks.cli").bench_main(argv))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "train":
        return train_main(rest)
    if cmd == "play":
        return play_main(rest)
    if cmd == "list":
        return list_main()
    if cmd == "export":
        return export_main(rest)
    if cmd == "average":
        return average_main(rest)
    if cmd == "demos":
        return demos_main(rest)
    if cmd == "pretrain":
        return pretrain_main(rest)
    if cmd == "bench":
        return bench_main(rest)
    return _fail(f"unknown command {cmd!r}\n{USAGE}")


if __name__ == "__main__":
    sys.exit(main())
