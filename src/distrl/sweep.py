"""``distrl sweep <task> --trials N``: hyperparameter search with Optuna (the ``sweep`` extra).

Each trial is a real run directory, ``<sweep dir>/trial_<k>/``, trained with the task's config,
the overrides after ``--`` and the trial's sampled values (a search space of dotted config
fields: ``DEFAULT_SPACES`` per algorithm, or ``--space FILE``). Its value is the mean of
``--metric`` (default ``episode_return_mean``) over the run's last ``--last`` records.

- One process (``--nproc 1``): ``distrl.train`` in this process; ``PruningHooks`` reports the
  running value to ``trial.report`` after every iteration and stops the run (a hook's stop: a
  final checkpoint) when ``trial.should_prune()``.
- ``--nproc N``: ``distrl train --config trial_<k>/config.yaml`` as a child process on N ranks;
  its metrics.jsonl is read while it runs, each new record reported, and a pruned trial's
  launcher gets SIGTERM (every rank stops at the same iteration and saves).

The sweep directory holds ``sweep.yaml`` (what the sweep was started with), ``study.db`` (the
Optuna storage: ``--resume DIR`` continues the study) and ``sweep.csv`` (one row per trial).
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import datetime
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import tyro
import yaml

from distrl.config import TrainConfig, to_dict, validate
from distrl.install import pip_install
from distrl.runner.hooks import Hooks
from distrl.safe_files import replace_text, safe_open

if TYPE_CHECKING:
    import optuna

    from distrl.runner.base import Runner

SPEC_KEYS = {"type", "low", "high", "log", "choices"}


@dataclass(frozen=True)
class Param:
    """One searched config field: ``name`` dotted (``agent.learning_rate``)."""

    name: str
    type: Literal["float", "int", "categorical"]
    low: float | None = None
    high: float | None = None
    log: bool = False
    choices: tuple[Any, ...] = ()

    def suggest(self, trial: optuna.Trial) -> Any:
        if self.type == "categorical":
            return trial.suggest_categorical(self.name, list(self.choices))
        assert self.low is not None and self.high is not None
        if self.type == "int":
            return trial.suggest_int(self.name, int(self.low), int(self.high), log=self.log)
        return trial.suggest_float(self.name, float(self.low), float(self.high), log=self.log)

    def extremes(self) -> list[Any]:
        """The values that bound the space: each must make a valid config."""
        return list(self.choices) if self.type == "categorical" else [self.low, self.high]


DEFAULT_SPACES: dict[str, tuple[Param, ...]] = {
    "ppo": (
        Param("agent.learning_rate", "float", 1e-4, 3e-3, log=True),
        Param("agent.ent_coef", "float", 0.0, 0.02),
        Param("agent.clip_coef", "float", 0.1, 0.3),
        Param("agent.num_minibatches", "categorical", choices=(1, 2, 4)),
        Param("agent.num_epochs", "int", 2, 8),
        Param("agent.gamma", "float", 0.95, 0.999),
        Param("agent.gae_lambda", "float", 0.9, 0.99),
    ),
    "rloo": (
        Param("agent.learning_rate", "float", 1e-4, 3e-3, log=True),
        Param("agent.ent_coef", "float", 0.0, 0.02),
        Param("agent.clip_coef", "float", 0.1, 0.3),
        Param("agent.num_epochs", "int", 1, 4),
    ),
    "pqn": (
        Param("agent.learning_rate", "float", 1e-4, 1e-3, log=True),
        Param("offpolicy.q_lambda", "float", 0.3, 0.95),
        Param("offpolicy.eps_fraction", "float", 0.1, 0.5),
        Param("agent.num_epochs", "int", 1, 4),
        Param("agent.gamma", "float", 0.95, 0.999),
    ),
    "dqn": (
        Param("agent.learning_rate", "float", 1e-4, 3e-3, log=True),
        Param("offpolicy.batch_size", "categorical", choices=(64, 128, 256)),
        Param("offpolicy.target_interval", "categorical", choices=(10, 100, 500)),
        Param("offpolicy.eps_fraction", "float", 0.05, 0.5),
        Param("agent.gamma", "float", 0.95, 0.999),
    ),
    "sac": (
        Param("agent.learning_rate", "float", 1e-4, 1e-3, log=True),
        Param("offpolicy.batch_size", "categorical", choices=(128, 256, 512)),
        Param("offpolicy.tau", "float", 0.002, 0.02, log=True),
        Param("agent.gamma", "float", 0.95, 0.999),
    ),
    "td3": (
        Param("agent.learning_rate", "float", 1e-4, 1e-3, log=True),
        Param("offpolicy.batch_size", "categorical", choices=(128, 256, 512)),
        Param("offpolicy.exploration_noise", "float", 0.05, 0.3),
        Param("agent.gamma", "float", 0.95, 0.999),
    ),
}
"""The space searched without ``--space``, per algorithm (``runner/algorithms.ALGORITHMS``)."""


@dataclass
class SweepArgs:
    """distrl sweep <task> --trials N [options] [-- train overrides]: a search with Optuna, each
    trial a run directory; the best trial and its distrl train command printed at the end."""

    task: tyro.conf.Positional[str | None] = None
    """The task (its tuned defaults, then the train overrides after ``--``)."""
    trials: int = 8
    """Trials in the sweep; with --resume, the total including those already run."""
    space: str | None = None
    """A YAML or JSON file mapping dotted config fields to {type: float|int|categorical, low,
    high, log, choices}; default: the algorithm's own space (distrl.sweep.DEFAULT_SPACES)."""
    metric: str = "episode_return_mean"
    """The metrics.jsonl key to optimize."""
    last: int = 5
    """The trial's value: the mean of --metric over the run's last this many records."""
    direction: Literal["maximize", "minimize"] = "maximize"
    """Whether a higher --metric is better (returns) or a lower one (a loss)."""
    nproc: int = 1
    """Ranks per trial: 1 trains in this process, N launches distrl train --nproc N."""
    parallel: int = 1
    """Trials trained side by side, each a ``distrl train`` process of its own with the cores
    split between them (``--threads`` after ``--`` overrides the split); 1: one at a time."""
    seed: int = 0
    """The sampler's seed (Optuna's TPESampler): the same seed proposes the same trials. The
    runs' own seed is the config's (--seed after --)."""
    pruner: Literal["median", "none"] = "median"
    """Stop a trial whose running value falls below the median of earlier trials' at the same
    iteration (Optuna's MedianPruner), or never."""
    prune_warmup: int | None = None
    """Iterations a trial runs before it may be pruned (default: a fifth of its
    --agent.max-iterations: early returns are mostly noise)."""
    sweep_dir: str | None = None
    """Where the sweep writes (default: runs/sweep-<task>-<timestamp>)."""
    resume: str | None = None
    """A sweep directory to continue: its task, overrides and settings from its sweep.yaml. A
    file imports no module: an ``--import MODULE`` its overrides name must be given again here
    (``distrl sweep --resume DIR --import MODULE``), or the sweep is refused."""


def import_optuna() -> Any:
    try:
        import optuna
    except ImportError as e:
        raise ImportError(
            f"distrl sweep needs Optuna, the sweep extra, which is not installed: "
            f"{pip_install('sweep')}"
        ) from e
    return optuna


def _nest(dotted: dict[str, Any]) -> dict[str, Any]:
    """{"agent.gamma": 0.9} -> {"agent": {"gamma": 0.9}}."""
    out: dict[str, Any] = {}
    for name, value in dotted.items():
        *sections, leaf = name.split(".")
        node = out
        for s in sections:
            node = node.setdefault(s, {})
        node[leaf] = value
    return out


def with_values(cfg: TrainConfig, values: dict[str, Any]) -> TrainConfig:
    """``cfg`` with the dotted fields set (unknown names refused as ``make_config`` does)."""
    from distrl.api import _override

    return validate(_override(cfg, _nest(values), ""))


def _check_field(cfg: TrainConfig, p: Param, where: str) -> None:
    """Refuse a name that is no leaf field of the config, a type that does not fit it, and
    bounds that make an invalid config; each error names the field."""
    node: Any = cfg
    for part in p.name.split("."):
        if not dataclasses.is_dataclass(node):
            raise ValueError(f"{where}: {p.name!r}: not a config field")
        if not hasattr(node, part):
            try:
                with_values(cfg, {p.name: None})  # raises, naming close and valid fields
            except ValueError as e:
                raise ValueError(f"{where}: {e}") from e
        node = getattr(node, part)
    if dataclasses.is_dataclass(node):
        names = ", ".join(f"{p.name}.{f.name}" for f in dataclasses.fields(node))
        raise ValueError(f"{where}: {p.name!r} is a section; search one of its fields: {names}")
    if p.type != "categorical" and isinstance(node, bool | str | tuple):
        raise ValueError(f"{where}: {p.name} is not a number; use type: categorical")
    if p.type == "float" and isinstance(node, int) and not isinstance(node, bool):
        raise ValueError(f"{where}: {p.name} is an integer; use type: int or categorical")
    for value in p.extremes():
        try:
            with_values(cfg, {p.name: value})
        except ValueError as e:
            raise ValueError(f"{where}: {p.name} = {value!r} makes an invalid config: {e}") from e


def _number(value: Any) -> Any:
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return float(value)
    return value


def parse_space(data: Any, where: str) -> tuple[Param, ...]:
    """A space file's mapping as Params; a malformed entry is refused naming it."""
    if not isinstance(data, dict) or not data:
        raise ValueError(f"{where}: expected a mapping of dotted config fields to their ranges")
    params = []
    for name, spec in data.items():
        if not isinstance(spec, dict):
            raise ValueError(f"{where}: {name}: expected {{type: float|int|categorical, ...}}")
        unknown = set(spec) - SPEC_KEYS
        if unknown:
            raise ValueError(
                f"{where}: {name}: unknown keys {sorted(unknown)}; known: {sorted(SPEC_KEYS)}"
            )
        kind = spec.get("type")
        if kind == "categorical":
            choices = spec.get("choices")
            if not isinstance(choices, list) or not choices:
                raise ValueError(f"{where}: {name}: categorical needs a non-empty choices list")
            params.append(Param(str(name), "categorical", choices=tuple(choices)))
            continue
        if kind not in ("float", "int"):
            raise ValueError(f"{where}: {name}: type must be float, int or categorical")
        # PyYAML reads 1e-5 (no dot) as a string: a number written so is taken as the number
        low, high = (_number(spec.get(k)) for k in ("low", "high"))
        log = bool(spec.get("log", False))
        if not (isinstance(low, int | float) and isinstance(high, int | float) and low < high):
            raise ValueError(f"{where}: {name}: needs numbers low < high (got {low}, {high})")
        if log and low <= 0:
            raise ValueError(f"{where}: {name}: log: true needs low > 0 (got {low})")
        params.append(Param(str(name), kind, low, high, log))
    return tuple(params)


def search_space(cfg: TrainConfig, space: dict | None, where: str) -> tuple[Param, ...]:
    """The sweep's space (a space file's mapping, or None: the algorithm's default), checked
    against ``cfg``; ``where`` names the file in errors."""
    if space is None:
        from distrl.envs.registry import get_task
        from distrl.runner.algorithms import ALGORITHMS, algorithm_for

        algorithm = algorithm_for(get_task(cfg.task), cfg.algorithm)
        key = next(k for k, v in ALGORITHMS.items() if v is algorithm)
        if key not in DEFAULT_SPACES:
            raise ValueError(f"no default search space for {algorithm.name}; pass --space FILE")
        params, where = DEFAULT_SPACES[key], f"the default {key} space"
    else:
        params = parse_space(space, where)
    for p in params:
        _check_field(cfg, p, where)
    return params


def read_space(path: str) -> Any:
    p = Path(path).expanduser()
    if not p.is_file():
        raise ValueError(f"--space {path}: no such file")
    try:
        return yaml.safe_load(p.read_text(encoding="utf-8"))  # JSON is YAML too
    except yaml.YAMLError as e:
        raise ValueError(f"--space {path}: not valid YAML or JSON: {e}") from e


def trial_value(records: list[dict], metric: str, last: int) -> float | None:
    """The mean of ``metric`` over the last ``last`` records that have it (None if none)."""
    values = [r[metric] for r in records if isinstance(r.get(metric), int | float)]
    return sum(values[-last:]) / len(values[-last:]) if values else None


class PruningHooks(Hooks):
    """Report the running value to the trial after every iteration; stop the run once Optuna
    prunes it."""

    def __init__(self, trial: optuna.Trial, metric: str, last: int) -> None:
        self.trial, self.metric, self.last = trial, metric, last
        self.records: list[dict] = []
        self.pruned_at: int | None = None

    def after_iteration(self, runner: Runner, record: dict[str, Any]) -> bool | None:
        return self.observe(record)

    def observe(self, record: dict[str, Any]) -> bool | None:
        self.records.append(record)
        value = trial_value(self.records, self.metric, self.last)
        if value is None or self.pruned_at is not None:
            return None
        step = int(record["iteration"])
        self.trial.report(value, step)
        if self.trial.should_prune():
            self.pruned_at = step
            return False
        return None


def _train_here(cfg: TrainConfig, watch: PruningHooks) -> str | None:
    """One trial in this process; the signal that interrupted it, if one did."""
    from distrl.api import train

    result = train(cfg, hooks=[watch])
    return result.metrics.get("interrupted")


@dataclass
class _Trial:
    """One trial of the sweep: in this process (done once started) or a launched run."""

    trial: Any
    """Its ``optuna.Trial``."""
    values: dict[str, Any]
    run_dir: Path
    watch: PruningHooks
    proc: subprocess.Popen | None = None
    seen: int = 0
    """Lines of its metrics.jsonl read so far."""
    done: bool = False
    interrupted: str | None = None
    """The signal that stopped it, if one did."""
    error: str = ""


def _launch(cfg: TrainConfig) -> subprocess.Popen:
    """``distrl train --config`` of ``cfg`` (its own ``cfg.nproc`` ranks) in its run dir."""
    run_dir = Path(cfg.run_dir or ".")
    config = run_dir / "config.yaml"
    replace_text(config, yaml.safe_dump(to_dict(cfg), sort_keys=False))
    argv = [sys.executable, "-m", "distrl.cli", "train", "--config", str(config)]
    return subprocess.Popen([*argv, "--run-dir", str(run_dir)])


def _poll(t: _Trial) -> bool:
    """Report a launched trial's new records, SIGTERM it once pruned (every rank stops at one
    iteration, saved); whether it has ended (its outcome set)."""
    if t.done or t.proc is None:
        return True
    ended = t.proc.poll() is not None
    metrics = t.run_dir / "metrics.jsonl"
    text = metrics.read_text(encoding="utf-8", errors="replace") if metrics.exists() else ""
    lines = text[: text.rfind("\n") + 1].splitlines()
    for line in lines[t.seen :]:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if t.watch.observe(record) is False:
            t.proc.send_signal(signal.SIGTERM)
    t.seen = len(lines)
    if ended:
        t.done = True
        try:
            t.interrupted = _exit_outcome(t.proc.returncode, t.watch)
        except RuntimeError as e:
            t.error = str(e)
    return t.done


def _exit_outcome(code: int, watch: PruningHooks) -> str | None:
    """A launched trial's exit code as the signal that interrupted it (None: it ended, or was
    pruned); RuntimeError for a failure."""
    from distrl import interrupts

    if watch.pruned_at is not None and code in (0, interrupts.exit_code("SIGTERM")):
        return None
    names = {interrupts.exit_code(s.name): s.name for s in interrupts.SIGNALS}
    if code in names:
        return names[code]
    if code != 0:
        raise RuntimeError(f"its distrl train exited with code {code}")
    return None


@dataclass
class SweepResult:
    sweep_dir: Path
    study: Any
    """The ``optuna.Study`` (its storage: ``sweep_dir/study.db``)."""
    trials: int
    interrupted: str | None = None
    value: str = ""
    """What a trial's value is, in words (``describe`` prints it)."""


def _settings(args: SweepArgs, overrides: list[str]) -> dict[str, Any]:
    fields = ("task", "space", "metric", "last", "direction", "nproc", "seed", "pruner")
    saved = {k: getattr(args, k) for k in (*fields, "prune_warmup")}
    if args.space is not None:
        saved["space"] = read_space(args.space)
    return {**saved, "overrides": list(overrides)}


def _open(args: SweepArgs, overrides: list[str]) -> tuple[Path, dict[str, Any]]:
    """The sweep directory and its settings: a new one, or ``--resume``'s."""
    if args.resume is None:
        if args.task is None:
            raise ValueError("usage: distrl sweep <task> --trials N [-- train overrides]")
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        task = args.task.replace(":", "_").replace("/", "_")
        sweep_dir = Path(args.sweep_dir or f"runs/sweep-{task}-{stamp}")
        if (sweep_dir / "study.db").exists():
            raise ValueError(
                f"{sweep_dir} holds a sweep already; continue it with --resume "
                f"{sweep_dir}, or pass another --sweep-dir"
            )
        return sweep_dir, _settings(args, overrides)
    sweep_dir = Path(args.resume)
    path = sweep_dir / "sweep.yaml"
    if not path.is_file():
        raise ValueError(f"--resume {args.resume}: no sweep.yaml there; pass a sweep directory")
    if args.task is not None or overrides:
        raise ValueError(
            f"--resume continues the sweep with its own task and overrides ({path}); leave them out"
        )
    s = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not (isinstance(s, dict) and isinstance(s.get("task"), str)
            and isinstance(s.get("overrides"), list)):  # fmt: skip
        raise ValueError(f"{path}: not the settings of a distrl sweep (task, overrides, ...)")
    check_file_imports(s, path, sweep_dir)
    return sweep_dir, s


def check_file_imports(s: dict[str, Any], path: Path, sweep_dir: Path) -> None:
    """A resumed sweep's file imports no module: its task passes ``check_task_from_file``, and
    each module an ``--import`` of its overrides names must be imported already, by this
    command line's ``--import MODULE`` (or the caller's code); ``run_sweep`` then leaves the
    file's ``--import`` flags out."""
    from distrl.args import _take_import_flags
    from distrl.envs.registry import check_task_from_file

    check_task_from_file(s["task"], str(path))
    named, _ = _take_import_flags([str(o) for o in s["overrides"]])
    missing = [m for m in dict.fromkeys(named) if m not in sys.modules]
    if missing:
        flags = " ".join(f"--import {m}" for m in missing)
        raise ValueError(
            f"{path} names {flags}, and a file never makes distrl import code: name the "
            f"modules on this command line: distrl sweep --resume {sweep_dir} {flags}"
        )


def run_sweep(
    args: SweepArgs,
    overrides: Sequence[str] = (),
    pruner: Any = None,
    say: Callable[[str], None] = print,
) -> SweepResult:
    """Run (or continue) a sweep; ``pruner``: an Optuna pruner instead of ``args.pruner``'s."""
    from distrl.args import _take_import_flags, parse_train_args
    from distrl.distributed.launch import default_threads
    from distrl.runner.algorithms import check_compatible

    sweep_dir, s = _open(args, list(overrides))  # a resumed sweep's file is checked first
    optuna = import_optuna()
    # the command line's --import flags run; a resumed sweep's file's are left out (_open: its
    # modules were imported by this command line already)
    given = [str(o) for o in s["overrides"]]
    base = parse_train_args(
        [s["task"], *(given if args.resume is None else _take_import_flags(given)[1])]
    )
    if int(s["nproc"]) > 1:  # else the overrides' own --nproc, if any
        base = dataclasses.replace(base, nproc=int(s["nproc"]))
    check_compatible(base, base.nproc)  # once, not in every trial: the strategy, the algorithm
    where = f"--space {args.space}" if args.resume is None else f"{sweep_dir}/sweep.yaml space"
    space = search_space(base, s["space"], where)
    if args.trials < 1 or int(s["last"]) < 1 or args.parallel < 1:
        raise ValueError("--trials, --last and --parallel must be at least 1")
    if pruner is None:
        if s.get("prune_warmup") is None:
            s["prune_warmup"] = base.agent.max_iterations // 5
        warmup = int(s["prune_warmup"])
        median = s["pruner"] == "median"
        pruner = optuna.pruners.MedianPruner(n_warmup_steps=warmup) if median else None
        pruner = pruner or optuna.pruners.NopPruner()
    sweep_dir.mkdir(parents=True, exist_ok=True)
    replace_text(sweep_dir / "sweep.yaml", yaml.safe_dump(s, sort_keys=False))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        storage=f"sqlite:///{(sweep_dir / 'study.db').resolve()}",
        study_name="sweep",
        pruner=pruner,
        direction=s["direction"],
        load_if_exists=True,
    )
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        study.tell(t.number, state=optuna.trial.TrialState.FAIL)  # a sweep stopped mid-trial
    # A resumed sweep's sampler draws on from where it stopped, not its first proposals again;
    # trials side by side: a running trial counts as its worst, so the next is drawn elsewhere
    study.sampler = optuna.samplers.TPESampler(
        seed=int(s["seed"]) + len(study.trials), constant_liar=args.parallel > 1
    )
    meaning = f"the mean of {s['metric']} over a trial's last {int(s['last'])} records"
    result = SweepResult(sweep_dir, study, args.trials, value=meaning)
    launched = base.nproc > 1 or args.parallel > 1
    threads = default_threads(args.parallel * base.nproc)  # the cores split between them
    running: list[_Trial] = []

    def start() -> _Trial:
        trial = study.ask()
        values = {p.name: p.suggest(trial) for p in space}
        run_dir = sweep_dir / f"trial_{trial.number}"
        run_dir.mkdir(parents=True, exist_ok=True)
        t = _Trial(trial, values, run_dir, PruningHooks(trial, s["metric"], int(s["last"])))
        try:
            cfg = dataclasses.replace(with_values(base, values), run_dir=str(run_dir))
            if args.parallel > 1 and cfg.threads is None:
                cfg = dataclasses.replace(cfg, threads=threads)
            if launched:
                t.proc = _launch(cfg)
            else:
                t.interrupted, t.done = _train_here(cfg, t.watch), True
        except (ValueError, RuntimeError) as e:
            t.error, t.done = str(e), True
        return t

    def conclude(t: _Trial) -> None:
        value = trial_value(t.watch.records, s["metric"], int(s["last"]))
        state, note = optuna.trial.TrialState.FAIL, ""
        if t.error:
            note = t.error
        elif t.interrupted is not None:
            note = f"interrupted by {t.interrupted}"
        elif t.watch.pruned_at is not None:
            state, note = optuna.trial.TrialState.PRUNED, f"pruned at {t.watch.pruned_at}"
        elif value is None:
            note = f"no {s['metric']!r} in {t.run_dir / 'metrics.jsonl'}"
        else:
            state = optuna.trial.TrialState.COMPLETE
        if state == optuna.trial.TrialState.COMPLETE:
            study.tell(t.trial, value)
        else:
            study.tell(t.trial, state=state)
        result.interrupted = result.interrupted or t.interrupted
        shown = "-" if value is None else f"{value:.4g}"
        outcome = f"{state.name.lower()} value {shown}"
        say(f"trial {t.trial.number}: {outcome} {t.values} {note}".rstrip())
        write_csv(study, sweep_dir / "sweep.csv")

    try:
        while running or (len(study.trials) < args.trials and result.interrupted is None):
            while (len(running) < args.parallel and len(study.trials) < args.trials
                   and result.interrupted is None):  # fmt: skip
                running.append(start())
            for t in [t for t in running if _poll(t)]:
                running.remove(t)
                conclude(t)
            if running:
                time.sleep(0.5)
    except KeyboardInterrupt:  # Ctrl-C reached the trials' launchers too: they stop and save
        for t in running:
            if t.proc is not None:
                t.proc.wait()
            t.interrupted, t.error = "SIGINT", ""
            conclude(t)
    write_csv(study, sweep_dir / "sweep.csv")
    return result


def write_csv(study: Any, path: Path) -> None:
    """One row per trial: number, state, value, run directory, then each searched field."""
    trials = study.get_trials(deepcopy=False)
    names = list(dict.fromkeys(n for t in trials for n in t.params))
    with safe_open(path, "w", newline="", encoding="utf-8") as f:  # never through a link
        w = csv.writer(f)
        w.writerow(["trial", "state", "value", "run_dir", *names])
        for t in trials:
            steps = t.intermediate_values  # a pruned trial's value: its last report
            value = t.value if t.value is not None else (steps[max(steps)] if steps else "")
            run_dir = path.parent / f"trial_{t.number}"
            w.writerow(
                [t.number, t.state.name, value, run_dir, *(t.params.get(n, "") for n in names)]
            )


def describe(result: SweepResult) -> str:
    """The best trial, its values and the command that trains it again."""
    import optuna

    study, sweep_dir = result.study, result.sweep_dir
    states = [t.state for t in study.trials]
    counts = ", ".join(
        f"{states.count(s)} {s.name.lower()}" for s in optuna.trial.TrialState if s in states
    )
    lines = [f"sweep {sweep_dir}: {len(states)} trials ({counts}); {sweep_dir / 'sweep.csv'}"]
    if result.value:
        lines.append(f"a trial's value: {result.value}")
    if result.interrupted:
        from distrl.args import IMPORTED

        imports = "".join(f" --import {m}" for m in IMPORTED)  # a file imports none: say them
        lines.append(
            f"interrupted by {result.interrupted}; continue with: distrl sweep "
            f"--resume {sweep_dir}{imports} --trials {result.trials}"
        )
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    if not complete:
        lines.append("no trial completed: no best trial")
        return "\n".join(lines)
    best = study.best_trial
    lines.append(f"best: trial {best.number}, value {best.value:.6g}")
    lines += [f"  {name} = {value!r}" for name, value in best.params.items()]
    lines.append(
        f"train it again: distrl train --config {sweep_dir / f'trial_{best.number}'}/config.yaml"
    )
    return "\n".join(lines)
