"""Command line: `distrl train|play|export|average|demos|pretrain|sweep|bench|list`, and
`train` / `play` as their own scripts. This module only turns argv into calls: a training run is
``session.check_before_start`` and ``session.run_training``; the other commands are their
modules' functions.

`train <task> [overrides]` is parsed in two steps (as mjlab does): the task name selects the
task's tuned default config, then tyro parses the overrides on top of it, e.g.

    train cartpole --env.num-envs 4096 --agent.max-iterations 10_000 --seed 3
    torchrun --nproc_per_node=2 --no_python train cartpole --distributed True
    distrl train cartpole --nproc 2          # starts torchrun for you
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Any

from distrl import interrupts, openmp, startup

startup.mark("python")

# A rank of `train` notes a signal from here on, before its imports take seconds: it stops at
# the first iteration boundary with its checkpoint instead of dying (torchrun would restart it).
interrupts.note_early(sys.argv, os.environ)

from distrl.args import IMPORTED, default_run_dir, parse_flags, parse_train_args, take_imports  # noqa: E402

# Before anything imports torch (nothing above does): idle OpenMP threads sleep instead of
# spinning, so a run beside a second one does not collapse (distrl/openmp.py).
openmp.set_defaults()

USAGE = """usage: distrl <command> ...

commands:
  train <task> [overrides]    train a policy (`distrl train <task> --help` lists overrides)
  train --config RUN/config.yaml [overrides]
                              train again with a run's config
  train <task> --population N [--pbt.OPTION V] [overrides]
                              population-based training of N members, each a
                              run under any strategy (`--population N --pbt.help`)
  train --import MODULE <task> [overrides]
                              import MODULE first (in every rank too): your own
                              tasks, registered with distrl.register_task
  play <run-dir|checkpoint>   run the deterministic policy and print mean ± std return;
                              --video out.mp4 records one episode; --import MODULE
                              for a task of your own, as in train
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
  sweep <task> --trials N [--space FILE] [--nproc N] [-- train overrides]
                              hyperparameter search with Optuna (the sweep extra):
                              each trial a run directory, the best one's command printed;
                              --resume SWEEP_DIR [--import MODULE] continues one
  bench <what> [options]      measure throughput, time to solve, scaling (`distrl bench --help`)
  list [--long]               every task, one line each (--long: whole descriptions)
"""


def _fail(msg: str, code: int = 2) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return code


def _split_at_dashes(argv: list[str]) -> tuple[list[str], list[str]]:
    """(the command's own words, the train overrides after ``--``)."""
    if "--" not in argv:
        return argv, []
    return argv[: argv.index("--")], argv[argv.index("--") + 1 :]


def train_main(argv: list[str] | None = None) -> int:
    if os.environ.get("DISTRL_ELASTIC_STANDBY"):  # a warm spare of the elastic launcher
        import distrl.runner.on_policy  # noqa: F401 (the imports a rank pays for, paid now)
        import distrl.session  # noqa: F401
        from distrl.distributed import elastic

        if not elastic.stand_by():
            return 0  # the run finished first
    startup.mark("cli")
    from distrl.distributed import early_torchrun

    argv = list(sys.argv[1:] if argv is None else argv)
    early_torchrun.prestart(argv)  # torchrun's process imports torch while this one does
    try:
        return _train(argv)
    finally:
        early_torchrun.discard()  # (a launch took it, or the config said otherwise)


def _train(argv: list[str]) -> int:
    import torch  # noqa: F401 (what the trainer's modules import first: timed on its own)

    startup.mark("torch")
    from distrl import session
    from distrl.distributed import launch, strategies

    if any(w.split("=", 1)[0] == "--population" or w.startswith("--pbt.") for w in argv):
        return population_main(argv)
    try:
        cfg = parse_train_args(argv)
        session.check_before_start(cfg)
    except ValueError as e:
        return _fail(str(e))
    startup.mark("config")
    if (cfg.nproc > 1 or cfg.nnodes > 1) and not launch.under_torchrun():
        run_dir = cfg.run_dir or str(default_run_dir(cfg.task))
        # Launcher flags do not reach the ranks: torchrun's own parser would take `--nproc` as an
        # abbreviation of its --nproc-per-node. The world size is in every checkpoint manifest.
        args = launch.strip_launch_flags(argv)
        args = ["train", *args, "--distributed", "True", "--run-dir", run_dir]
        if cfg.max_restarts > 0 and cfg.resume is None:  # a restart continues, not starts over
            args += ["--resume", "auto"]
        start = strategies.launcher(cfg.dist.strategy)
        if start is not launch.launch:  # elastic starts its own ranks: no torchrun
            from distrl.distributed import early_torchrun

            early_torchrun.discard()
        nodes = launch.Nodes.of(cfg)
        return _launch(cfg, start, args, run_dir, nodes)
    if not launch.under_torchrun():
        from distrl.rundir import RunDirError

        try:
            final = session.run_training(cfg)
        except RunDirError as e:  # taken by another run meanwhile, or not writable
            return _fail(str(e))
        # after Ctrl-C or SIGTERM (the final checkpoint written): the shell's code for the signal
        return interrupts.exit_code(final.get("interrupted"))
    # A rank leaves with os._exit, skipping the C++ destructors of interpreter teardown: under
    # load a finished rank was seen to abort there (SIGABRT, "terminate called without an
    # active exception"), turning a finished run into a failed one for torchrun; and with a
    # peer lost, the process group's teardown can block on that peer or abort. Every file is
    # closed and fsynced by then.
    from distrl.distributed import liveness

    code = 0
    try:
        session.run_training(cfg)
    except (Exception, KeyboardInterrupt) as e:
        rank = int(os.environ.get("RANK", "0"))
        # the last question this rank asks: a busy store host (a loaded machine) gets longer
        dropped = isinstance(e, liveness.RankDropped)
        failed = isinstance(e, liveness.PeerFailure) and not dropped
        why = liveness.dropped_reason(rank, 3 * liveness.STORE_WAIT) if failed else None
        if isinstance(e, liveness.JoinRefused):  # a user's error, said in one line
            print(f"error: {e}", file=sys.stderr)
            code = 2
        elif dropped:  # it knows why: leave quietly, exit 0
            print(f"{e}; leaving", file=sys.stderr)
            liveness.mark_left(rank)
        elif why is not None:  # the run goes on without this rank: leave quietly, exit 0
            print(f"rank {rank}: dropped from the run ({why}); leaving", file=sys.stderr)
            liveness.mark_left(rank)
        else:
            traceback.print_exc()
            code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _launch(cfg: Any, start: Any, args: list[str], run_dir: str, nodes: Any) -> int:
    """Start the ranks with ``start`` (a strategy's launcher), node 0 holding the run
    directory's lock from before the first rank starts until the last one ends; on one
    machine, the keys the ranks act on in their stores live under a secret of the run's
    (``store_secret``), which reaches them in their environment."""
    from distrl import rundir
    from distrl.distributed import store_secret

    lock, secret = None, None
    os.environ.pop(store_secret.SECRET_ENV, None)  # (several machines: none; see the docs)
    try:
        if nodes.rank == 0:  # node 0 writes the run: one launch per run directory
            lock = rundir.lock_for_launch(run_dir, fresh=cfg.resume is None)
            os.environ[rundir.LOCK_HOLDER_ENV] = str(os.getpid())  # the ranks' environment
        if nodes.count == 1:
            token = store_secret.new()
            secret = store_secret.write(run_dir, token)
            os.environ[store_secret.SECRET_ENV] = token
        return int(
            start(cfg.nproc, cfg.max_restarts, args, cfg.stop_timeout, run_dir, IMPORTED, nodes)
        )
    except ValueError as e:  # another live run there; a node that cannot host or reach the store
        return _fail(str(e))
    finally:
        os.environ.pop(store_secret.SECRET_ENV, None)
        if secret is not None:
            store_secret.remove(secret)
        if lock is not None:
            os.environ.pop(rundir.LOCK_HOLDER_ENV, None)
            lock.release()


def play_main(argv: list[str] | None = None) -> int:
    from distrl.play import PlayArgs, play
    from distrl.render import RenderUnavailable

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        play(parse_flags(PlayArgs, take_imports(argv), "play"))
    except (ValueError, ImportError, RenderUnavailable) as e:  # each names its fix
        return _fail(str(e))
    return 0


def export_main(argv: list[str]) -> int:
    from distrl.exporting import ExportArgs, ParityError, describe, export_policy

    try:
        args = parse_flags(ExportArgs, take_imports(argv), "distrl export")
        result = export_policy(args.path, args.format, args.output, check=args.check)
    except ParityError as e:  # a file was made and disagreed: a failure, not a usage mistake
        return _fail(str(e), 1)
    except ValueError as e:  # ExportError and the checkpoint's own errors name their fix
        return _fail(str(e))
    print(describe(result))
    return 0


def average_main(argv: list[str]) -> int:
    from distrl import averaging

    try:
        args = parse_flags(averaging.AverageArgs, argv, "distrl average")
        result = averaging.average(args.paths, args.from_iteration, args.to_iteration, args.output)
    except ValueError as e:  # each names its fix (CheckpointError too)
        return _fail(str(e))
    print(averaging.describe(result))
    return 0


def demos_main(argv: list[str]) -> int:
    from distrl import demos

    try:
        demos.demos_main(parse_flags(demos.DemosArgs, argv, "distrl demos"))
    except (ValueError, ImportError) as e:  # each names its fix
        return _fail(str(e))
    return 0


def pretrain_main(argv: list[str]) -> int:
    from distrl.distributed import launch
    from distrl.pretrain import PretrainArgs, pretrain

    own, overrides = _split_at_dashes(argv)
    ranked = launch.under_torchrun()
    try:
        pretrain(parse_flags(PretrainArgs, own, "distrl pretrain"), overrides)
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


def population_main(argv: list[str]) -> int:
    """``train <task> --population N``: population-based training (distrl/population.py)."""
    from distrl import population

    try:
        own, overrides = population.take_flags(argv)
        assert own is not None
        result = population.run_population(own, overrides)
    except (ValueError, RuntimeError) as e:
        return _fail(str(e))
    print(population.describe(result))
    return interrupts.exit_code(result.interrupted)


def sweep_main(argv: list[str]) -> int:
    from distrl import sweep

    own, overrides = _split_at_dashes(argv)
    try:
        # --import MODULE before the `--`: what a resumed sweep's modules come from (sweep.py)
        own = take_imports(own)
        result = sweep.run_sweep(parse_flags(sweep.SweepArgs, own, "distrl sweep"), overrides)
    except (ValueError, ImportError) as e:  # each names its fix
        return _fail(str(e))
    print(sweep.describe(result))
    return interrupts.exit_code(result.interrupted)


def list_main(argv: list[str] | None = None) -> int:
    """One line a task, its description cut to the terminal's width (``--long``: whole)."""
    import shutil

    from distrl.envs.registry import list_tasks
    from distrl.install import pip_install

    argv = argv or []
    if argv not in ([], ["--long"]):
        return _fail("usage: distrl list [--long]")
    tasks = list_tasks()
    width = max(len(t.name) for t in tasks) + 2
    room = max(shutil.get_terminal_size((100, 24)).columns - width, 20)
    print(f"{'task':<{width}}description")
    for t in tasks:
        text = t.description
        if argv != ["--long"] and len(text) > room:
            text = text[: room - 1].rstrip() + "…"
        print(f"{t.name:<{width}}{text}")
    print("Any Gymnasium id works as gym:<Id> (MuJoCo ids need the mujoco extra).")
    print("distrl list --long: whole descriptions. An extra installs from the checkout:")
    print(f"  {pip_install('<extra>')}  (distrl is not on PyPI)")
    return 0


def bench_main(argv: list[str]) -> int:
    """`distrl bench`: the benchmarks are the repository's top-level ``benchmarks`` package,
    beside ``src/``, not part of the installed package; they run from a checkout (an editable
    install). The checkout's root goes first on the path, here and for the benchmarks'
    subprocesses."""
    import importlib

    from distrl.install import pip_install

    root = Path(__file__).resolve().parents[2]
    if not (root / "benchmarks" / "cli.py").is_file():
        return _fail(
            "`distrl bench` runs the benchmarks of a source checkout (benchmarks/ beside src/), "
            "which this install does not have: git clone the repository and, in it, "
            f"{pip_install('dev')}, then run `distrl bench` there"
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
    if cmd in ("--version", "-V"):
        from distrl import __version__

        print(f"distrl {__version__}")
        return 0
    if cmd == "train":
        return train_main(rest)
    if cmd == "play":
        return play_main(rest)
    if cmd == "list":
        return list_main(rest)
    if cmd == "export":
        return export_main(rest)
    if cmd == "average":
        return average_main(rest)
    if cmd == "demos":
        return demos_main(rest)
    if cmd == "pretrain":
        return pretrain_main(rest)
    if cmd == "sweep":
        return sweep_main(rest)
    if cmd == "bench":
        return bench_main(rest)
    return _fail(f"unknown command {cmd!r}\n{USAGE}")


def run() -> None:
    """The ``distrl`` command's process (its console script, ``python -m distrl``): ``main``,
    then out without the interpreter's last garbage collection, which with torch loaded walks
    every object torch made: 0.8 of the 1.2-1.4 s a process took to end on the 2-core VM after
    its work was done (atexit handlers, flushes and module teardown still run). Not in
    ``main``: a caller's process (the tests, a notebook) goes on collecting."""
    try:
        code = main()
    except KeyboardInterrupt:  # Ctrl-C before a command's handlers, while it imports: one line
        print("distrl: interrupted", file=sys.stderr)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)  # the shell's status for Ctrl-C, as Python gives
        raise
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    run()
