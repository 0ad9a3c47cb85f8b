"""``distrl train <task> --population N``: population-based training (PBT) of N members.

Each member is a whole run, ``<run dir>/member_<k>/``, under any strategy and on any number of
ranks (the train overrides' ``--nproc``, ``--dist.strategy``): this process trains every member
for one generation (``--pbt.interval`` env steps) with ``distrl train --resume auto``, reads
their ``metrics.jsonl``, and between generations lets the worst members copy a better one's
newest checkpoint (its whole training state: weights, optimizer, normalizers, replay) and
explore its hyperparameters (``distrl/pbt.py``: the rules). A member that copied another starts
its next generation from that checkpoint with the new hyperparameters, as Isaac Lab's PBT
restarts a member's process. The members exchange nothing but checkpoints, so a member's ranks
never know they are in a population, and a member that fails is replaced like a bad one.

The run directory holds ``population.yaml`` (the command it was started with: a resume must
repeat it), ``population.json`` (the generation, each member's hyperparameters and the
explorer's random state: what a resume continues from), ``pbt.csv`` (a row per member per
generation: its score, the member it started from, its hyperparameters), ``pbt.png`` (the
hyperparameters of the lineage that won) and, per member, its run directory with its own
TensorBoard events, ``log.txt`` (its console) and ``pbt/`` (TensorBoard: its score and
hyperparameters over env steps).
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import math
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from distrl import checkpoint_store as store
from distrl import pbt
from distrl.config import TrainConfig, to_dict
from distrl.safe_files import replace_text, safe_open
from distrl.sweep import DEFAULT_SPACES, Param, read_space, search_space, trial_value, with_values
from distrl.telemetry import read_metrics


@dataclass
class PBTOptions:
    """When and how members are ranked, copied and explored."""

    interval: int = 50_000
    """Env steps each member trains between two rankings (a generation), all its ranks
    together; rounded up to whole iterations."""
    fraction: float = 0.25
    """The worst this fraction of the members copy one of the best this fraction (at least one
    member, at most half)."""
    resample: float = 0.25
    """Probability that an explored hyperparameter is drawn afresh from its range instead of
    perturbed."""
    perturb: float = 0.2
    """A perturbed number is multiplied by 1 + this or 1 - this."""
    space: str | None = None
    """A YAML file of the hyperparameters and their ranges, as distrl sweep's --space; default:
    the algorithm's own (distrl.sweep.DEFAULT_SPACES; PPO's learning rate is replaced by
    --agent.desired-kl under the adaptive schedule, which sets the rate itself)."""
    metric: str = "episode_return_mean"
    """The metrics.jsonl key that ranks the members, higher is better."""
    last: int = 3
    """A member's score: the mean of --pbt.metric over its generation's last this many
    records."""
    parallel: int | None = None
    """Members trained at once; default: as many as the cores hold at --nproc ranks each."""
    seed: int = 0
    """The explorer's seed (which members copy which, and the new values). Member k's runs
    use --seed + 1000 k."""


@dataclass
class PopulationArgs:
    """distrl train <task> --population N [--pbt.OPTION VALUE ...] [train overrides]:
    population-based training of N members (docs/population.md)."""

    population: int = 4
    """Members (at least 2)."""
    pbt: PBTOptions = field(default_factory=PBTOptions)


@dataclass
class Member:
    index: int
    values: dict[str, Any]
    parent: int
    """The member whose training state this one started the current generation from."""
    lost: str = ""
    """Why its last generation failed ('' when it did not)."""


@dataclass
class Population:
    generation: int
    members: list[Member]
    rng_state: Any
    parents: list[list[int]] = field(default_factory=list)
    """Per finished generation: each member's ``parent`` in it (``pbt.lineage``)."""
    scores: list[float | None] = field(default_factory=list)
    """The last finished generation's scores."""
    elapsed: float = 0.0
    """Seconds the finished generations took."""


# ---- the command line ----------------------------------------------------------------------


def take_flags(argv: Sequence[str]) -> tuple[list[str] | None, list[str]]:
    """(the PBT flags of ``argv`` (``PopulationArgs``'s), or None without ``--population``; the
    rest: the train overrides). ``--population N`` and every ``--pbt.NAME VALUE``."""
    own: list[str] = []
    rest: list[str] = []
    words = list(argv)
    i = 0
    found = False
    while i < len(words):
        word = words[i]
        name = word.split("=", 1)[0]
        if name == "--population" or name.startswith("--pbt."):
            found = found or name == "--population"
            if "=" in word:
                own.append(word)
            elif name == "--pbt.help":
                own.append("--help")
            else:
                if i + 1 >= len(words):
                    raise ValueError(f"{word} needs a value")
                own += [word, words[i + 1]]
                i += 1
        else:
            rest.append(word)
        i += 1
    if not found:
        if own:
            raise ValueError("--pbt.* options need --population N (the number of members)")
        return None, rest
    return own, rest


def parse(own: list[str], overrides: list[str]) -> tuple[PopulationArgs, TrainConfig]:
    """The PBT options and the members' base config (the train overrides on the task's)."""
    from distrl.args import parse_flags, parse_train_args
    from distrl.runner.algorithms import check_compatible

    args = parse_flags(PopulationArgs, own, "distrl train <task> --population N")
    base = parse_train_args(list(overrides))
    o = args.pbt
    if args.population < 2:
        raise ValueError(f"--population {args.population}: a population needs at least 2 members")
    if not 0 < o.fraction <= 0.5:
        raise ValueError(f"--pbt.fraction {o.fraction}: must be in (0, 0.5]")
    if not 0 <= o.resample <= 1:
        raise ValueError(f"--pbt.resample {o.resample}: must be in [0, 1]")
    if not 0 < o.perturb < 1:
        raise ValueError(f"--pbt.perturb {o.perturb}: must be in (0, 1)")
    for name in ("interval", "last"):
        if getattr(o, name) < 1:
            raise ValueError(f"--pbt.{name} must be at least 1")
    if o.parallel is not None and o.parallel < 1:
        raise ValueError("--pbt.parallel must be at least 1")
    if base.resume not in (None, "auto"):
        raise ValueError(
            f"--resume {base.resume}: a population resumes as a whole: --resume auto with the "
            f"population's --run-dir"
        )
    if base.init_from is not None:
        raise ValueError("--init-from is not taken by a population (each member starts fresh)")
    check_compatible(base, base.nproc * base.nnodes)
    from distrl.distributed.strategies import collectors

    return args, base.with_budget(collectors(base))  # --agent.total-timesteps, if set


def space_of(o: PBTOptions, base: TrainConfig) -> tuple[Param, ...]:
    """The explored hyperparameters (``--pbt.space`` or the algorithm's own), checked."""
    if o.space is not None:
        params = search_space(base, read_space(o.space), f"--pbt.space {o.space}")
    else:
        params = search_space(base, None, "the default space")
        if base.agent.lr_schedule == "adaptive":
            kl = Param("agent.desired_kl", "float", 0.002, 0.05, log=True)
            params = tuple(kl if p.name == "agent.learning_rate" else p for p in params)
            search_space(base, {kl.name: {"type": "float", "low": kl.low, "high": kl.high,
                                          "log": True}}, "the default space")  # fmt: skip
    pbt.check_space(params)
    return tuple(pbt.holding(p, _get(base, p.name)) for p in params)


# ---- the members' runs ---------------------------------------------------------------------


def member_config(base: TrainConfig, m: Member, run_dir: Path, iterations: int,
                  threads: int | None) -> TrainConfig:  # fmt: skip
    """Member ``m``'s config for a generation that ends at iteration ``iterations`` (its
    schedules run over the whole budget, ``base.agent.max_iterations``)."""
    cfg = with_values(base, m.values)
    agent = dataclasses.replace(cfg.agent, stop_at=iterations, total_timesteps=None)
    return dataclasses.replace(
        cfg,
        agent=agent,
        seed=base.seed + 1000 * m.index,
        run_dir=str(run_dir),
        resume="auto",
        threads=cfg.threads if cfg.threads is not None else threads,
        progress=False,
    )


def newest_iteration(run_dir: Path) -> int:
    found = store.list_checkpoints(run_dir / "checkpoints")
    return (store.checkpoint_iteration(found[0]) or 0) if found else 0


def write_config(cfg: TrainConfig) -> Path:
    """``cfg`` as ``member_<k>/pbt_config.yaml``, what the member's generation trains."""
    run_dir = Path(cfg.run_dir or ".")
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "pbt_config.yaml"
    replace_text(path, yaml.safe_dump(to_dict(cfg), sort_keys=False))
    return path


def start_member(config: Path, imports: Sequence[str]) -> subprocess.Popen:
    """``distrl train --config member/pbt_config.yaml --resume auto`` (a member on several
    ranks: its launcher) in its own session (a Ctrl-C reaches it once, forwarded by this
    process), its console into ``member/log.txt``."""
    argv = [sys.executable, "-m", "distrl.cli", "train"]
    for module in imports:
        argv += ["--import", module]
    argv += ["--config", str(config), "--run-dir", str(config.parent), "--resume", "auto"]
    with safe_open(config.parent / "log.txt", "ab") as log:
        return subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip


class PoolWorker:
    """A ``distrl.population_worker`` process: one-process members' generations one after
    another, without a new interpreter each (``poll`` and ``send_signal`` as a ``Popen``)."""

    def __init__(self, imports: Sequence[str]) -> None:
        argv = [sys.executable, "-m", "distrl.population_worker"]
        for module in imports:
            argv += ["--import", module]
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        self.pending = b""

    def submit(self, config: Path) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{config}\n".encode())
        self.proc.stdin.flush()

    def poll(self) -> int | None:
        """The generation's exit code once the worker answered (or died: then its own)."""
        out = self.proc.stdout
        assert out is not None
        while b"\n" not in self.pending and select.select([out], [], [], 0)[0]:
            chunk = os.read(out.fileno(), 64)
            if not chunk:  # the worker died mid-generation
                code = self.proc.wait()
                return code if code > 0 else 128 - code if code < 0 else 1
            self.pending += chunk
        if b"\n" not in self.pending:
            return None
        line, self.pending = self.pending.split(b"\n", 1)
        return int(line)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def send_signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def copy_checkpoint(donor: Path, member: Path) -> Path:
    """The donor's newest valid checkpoint as the member's newest: both files copied under
    temporary names and renamed, the manifest last (as a save writes them)."""
    path, _ = store.find_latest_valid(donor / "checkpoints")
    if path is None:
        raise RuntimeError(f"{donor}: no valid checkpoint to copy")
    target = member / "checkpoints"
    target.mkdir(parents=True, exist_ok=True)
    for older in store.list_checkpoints(target):  # the newest must be the copy
        if (store.checkpoint_iteration(older) or 0) >= (store.checkpoint_iteration(path) or 0):
            older.unlink(missing_ok=True)
            store.manifest_path(older).unlink(missing_ok=True)
    for src in (path, store.manifest_path(path)):
        tmp = target / f".{src.name}.pbt-copy"
        tmp.unlink(missing_ok=True)  # a link left there is removed, not written through
        shutil.copyfile(src, tmp)
        os.replace(tmp, target / src.name)
    return target / path.name


# ---- the controller ------------------------------------------------------------------------


@dataclass
class PopulationResult:
    run_dir: Path
    best: int | None
    scores: list[float | None]
    interrupted: str | None = None


class Controller:
    """One population's schedule: generations of member runs, then exploit and explore."""

    def __init__(self, args: PopulationArgs, base: TrainConfig, overrides: Sequence[str],
                 run_dir: Path, say: Callable[[str], None] = print) -> None:  # fmt: skip
        from distrl.distributed.strategies import collectors

        self.args, self.base, self.run_dir, self.say = args, base, run_dir, say
        self.o = o = args.pbt
        self.space = space_of(o, base)
        self.per_iteration = base.batch_size * collectors(base)
        self.gen_iterations = max(1, math.ceil(o.interval / self.per_iteration))
        self.generations = max(1, math.ceil(base.agent.max_iterations / self.gen_iterations))
        cores = os.cpu_count() or 1
        ranks = max(1, base.nproc)
        self.parallel = o.parallel or max(1, min(args.population, cores // ranks))
        self.threads = None if self.parallel == 1 else max(1, cores // (self.parallel * ranks))
        self.settings = {"overrides": list(overrides), "pbt": dataclasses.asdict(args)}
        self.running: dict[int, subprocess.Popen | PoolWorker] = {}
        """Member -> what trains its generation now."""
        self.idle: list[PoolWorker] = []
        self.signal: int = 0

    # -- state
    def open(self) -> Population:
        state_path = self.run_dir / "population.json"
        settings_path = self.run_dir / "population.yaml"
        if state_path.exists():
            if self.base.resume is None:
                raise ValueError(
                    f"{self.run_dir} holds a population already; continue it with --resume "
                    f"auto, or pass another --run-dir"
                )
            started = yaml.safe_load(settings_path.read_text(encoding="utf-8"))
            if started != self.settings:  # compared, never run: a file imports nothing
                given = " ".join((started or {}).get("overrides", []) or [])
                raise ValueError(
                    f"{settings_path}: the population was started with other settings (train "
                    f"overrides: {given!r}; --pbt.*: {(started or {}).get('pbt')}); repeat "
                    f"its command with --resume auto"
                )
            return self.load(state_path)
        rng = random.Random(self.o.seed)
        defaults = {p.name: _get(self.base, p.name) for p in self.space}
        members = [Member(0, defaults, 0)]  # the defaults are in the population
        members += [
            Member(k, {p.name: pbt.sample(p, rng) for p in self.space}, k)
            for k in range(1, self.args.population)
        ]
        self.run_dir.mkdir(parents=True, exist_ok=True)
        replace_text(settings_path, yaml.safe_dump(self.settings, sort_keys=False))
        pop = Population(0, members, rng.getstate())
        self.save(pop)
        return pop

    def load(self, path: Path) -> Population:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            members = [Member(int(m["index"]), dict(m["values"]), int(m["parent"]),
                              str(m.get("lost", ""))) for m in data["members"]]  # fmt: skip
            version, inner, gauss = data["rng_state"]
            rng_state = (int(version), tuple(int(x) for x in inner), gauss)
            parents = [[int(p) for p in row] for row in data["parents"]]
            scores = [None if x is None else float(x) for x in data["scores"]]
            pop = Population(int(data["generation"]), members, rng_state, parents, scores,
                             float(data["elapsed"]))  # fmt: skip
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{path}: not a distrl population's state: {e}") from None
        names = {p.name for p in self.space}
        if len(members) != self.args.population or any(set(m.values) != names for m in members):
            raise ValueError(f"{path}: its members do not match --population and the space")
        return pop

    def save(self, pop: Population) -> None:
        data = {
            "generation": pop.generation,
            "members": [dataclasses.asdict(m) for m in pop.members],
            "rng_state": pop.rng_state,
            "parents": pop.parents,
            "scores": pop.scores,
            "elapsed": pop.elapsed,
        }
        replace_text(self.run_dir / "population.json", json.dumps(data, indent=1))

    def member_dir(self, k: int) -> Path:
        return self.run_dir / f"member_{k}"

    # -- one generation
    def train_generation(self, pop: Population, target: int) -> dict[int, str]:
        """Every member trained to iteration ``target``, ``parallel`` at a time (a member of
        one process in a ``PoolWorker``, one of several ranks by its own launcher); returns
        why each member that failed did."""
        from distrl.args import IMPORTED

        pooled = self.base.nproc == 1 and self.base.nnodes == 1
        todo = [m for m in pop.members if newest_iteration(self.member_dir(m.index)) < target]
        failed: dict[int, str] = {}
        while (todo or self.running) and not self.signal:
            while todo and len(self.running) < self.parallel:
                m = todo.pop(0)
                cfg = member_config(self.base, m, self.member_dir(m.index), target, self.threads)
                path = write_config(cfg)
                if pooled:
                    worker = self.idle.pop() if self.idle else PoolWorker(IMPORTED)
                    worker.submit(path)
                    self.running[m.index] = worker
                else:
                    self.running[m.index] = start_member(path, IMPORTED)
            for k, slot in list(self.running.items()):
                code = slot.poll()
                if code is None:
                    continue
                del self.running[k]
                if isinstance(slot, PoolWorker) and slot.alive:
                    self.idle.append(slot)
                if code != 0:
                    failed[k] = f"exit code {code}; see {self.member_dir(k) / 'log.txt'}"
            time.sleep(0.05)
        if self.signal:  # forwarded once: each member stops at an iteration and saves
            for slot in self.running.values():
                while slot.poll() is None:
                    time.sleep(0.05)
            self.running.clear()
        return failed

    def score(self, k: int, first: int, target: int) -> float | None:
        path = self.member_dir(k) / "metrics.jsonl"
        records = read_metrics(path) if path.is_file() else []
        records = [r for r in records if first < int(r.get("iteration", -1)) <= target]
        return trial_value(records, self.o.metric, self.o.last)

    def run(self) -> PopulationResult:
        pop = self.open()
        self.say(
            f"population: {self.args.population} members, {self.generations} generations of "
            f"{self.gen_iterations} iterations ({self.gen_iterations * self.per_iteration} env "
            f"steps each), {self.parallel} at a time; objective: the mean of "
            f"{self.o.metric} over a member's last {self.o.last} records of a generation; "
            f"exploring {', '.join(p.name for p in self.space)}"
        )
        previous = {signal.SIGINT: signal.getsignal(signal.SIGINT),
                    signal.SIGTERM: signal.getsignal(signal.SIGTERM)}  # fmt: skip
        for s in previous:
            signal.signal(s, self.on_signal)
        try:
            while pop.generation < self.generations and not self.signal:
                self.one_generation(pop)
        finally:
            for worker in self.idle:
                worker.close()
            for s, handler in previous.items():
                signal.signal(s, handler)
        scores = pop.scores or [None] * self.args.population
        live = [k for k, s in enumerate(scores) if s is not None]
        best = max(live, key=lambda k: scores[k] or 0.0) if live else None
        if best is not None and not self.signal:
            write_plot(self.run_dir, self.space, pop, best)
        name = signal.Signals(self.signal).name if self.signal else None
        return PopulationResult(self.run_dir, best, scores, name)

    def on_signal(self, signum: int, frame: object) -> None:
        if self.signal:
            return
        self.signal = signum
        for slot in [*self.running.values(), *self.idle]:
            with contextlib.suppress(OSError):
                slot.send_signal(signum)

    def one_generation(self, pop: Population) -> None:
        g = pop.generation
        first, target = g * self.gen_iterations, min((g + 1) * self.gen_iterations,
                                                      self.base.agent.max_iterations)  # fmt: skip
        started = time.perf_counter()
        failed = self.train_generation(pop, target)
        if self.signal:
            return
        scores = [None if m.index in failed else self.score(m.index, first, target)
                  for m in pop.members]  # fmt: skip
        for m in pop.members:
            m.lost = failed.get(m.index, "" if scores[m.index] is not None else
                                f"no {self.o.metric!r} in its records")  # fmt: skip
        if all(s is None for s in scores):
            raise RuntimeError(
                f"generation {g}: no member has a score ({'; '.join(m.lost for m in pop.members)})"
            )
        env_steps = target * self.per_iteration
        pop.elapsed += time.perf_counter() - started
        self.record(pop, scores, env_steps)
        pop.parents.append([m.parent for m in pop.members])
        rng = random.Random()
        rng.setstate(pop.rng_state)
        copies = pbt.exploit(scores, self.o.fraction, rng) if g + 1 < self.generations else []
        shown = ", ".join(f"{k}: {_fmt(s)}" for k, s in enumerate(scores))
        self.say(
            f"generation {g + 1}/{self.generations} ({env_steps} env steps per member, "
            f"{time.perf_counter() - started:.1f} s): scores {shown}"
        )
        for c in copies:
            m, donor = pop.members[c.member], pop.members[c.donor]
            copy_checkpoint(self.member_dir(c.donor), self.member_dir(c.member))
            why = f"lost: {m.lost}" if m.lost else f"score {_fmt(scores[c.member])}"
            m.values = pbt.explore(self.space, donor.values, self.o.resample,
                                   self.o.perturb, rng)  # fmt: skip
            m.parent = c.donor
            self.say(f"  member {c.member} ({why}) copies member {c.donor}: {_values(m.values)}")
        for m in pop.members:
            if all(c.member != m.index for c in copies):
                m.parent = m.index
        pop.rng_state = rng.getstate()
        pop.generation += 1
        pop.scores = scores
        self.save(pop)

    def record(self, pop: Population, scores: list[float | None], env_steps: int) -> None:
        """pbt.csv's rows and each member's TensorBoard scalars of this generation."""
        names = [p.name for p in self.space]
        path = self.run_dir / "pbt.csv"
        new = not path.exists()
        with safe_open(path, "a", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            if new:
                w.writerow(["generation", "env_steps", "wall_s", "member", "started_from",
                            "score", "lost", *names])  # fmt: skip
            for m in pop.members:
                score = "" if scores[m.index] is None else scores[m.index]
                w.writerow([pop.generation, env_steps, round(pop.elapsed, 2), m.index, m.parent,
                            score, m.lost, *(m.values[n] for n in names)])  # fmt: skip
        if not self.base.tensorboard:
            return
        from torch.utils.tensorboard import SummaryWriter

        for m in pop.members:
            writer = SummaryWriter(log_dir=str(self.member_dir(m.index) / "pbt"))
            if scores[m.index] is not None:
                writer.add_scalar("pbt/score", scores[m.index], env_steps)
            writer.add_scalar("pbt/started_from", m.parent, env_steps)
            for n in names:
                if isinstance(m.values[n], int | float):
                    writer.add_scalar(f"pbt/{n}", m.values[n], env_steps)
            writer.close()


def _get(cfg: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        cfg = getattr(cfg, part)
    return cfg


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _values(values: dict[str, Any]) -> str:
    return ", ".join(
        f"{k.split('.')[-1]}={v:.4g}" if isinstance(v, float) else f"{k.split('.')[-1]}={v}"
        for k, v in values.items()
    )


def write_plot(run_dir: Path, space: Sequence[Param], pop: Population, best: int) -> Path | None:
    """``pbt.png``: each hyperparameter over the generations for every member (thin) and for
    the lineage of the best member (thick), and the scores, from ``pbt.csv``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = list(csv.DictReader((run_dir / "pbt.csv").open(encoding="utf-8")))
    if not rows:
        return None
    line = pbt.lineage(pop.parents, best)
    names = [p.name for p in space]
    fig, axes = plt.subplots(len(names) + 1, 1, figsize=(7, 2.0 * (len(names) + 1)), sharex=True)
    for i, name in enumerate(["score", *names]):
        ax = axes[i]
        for k in range(len(pop.members)):
            pts = [(int(r["env_steps"]), float(r[name])) for r in rows
                   if int(r["member"]) == k and r[name] not in ("", None)]  # fmt: skip
            steps = "default" if name == "score" else "steps-pre"  # held for a generation
            if pts:
                ax.plot(*zip(*pts, strict=True), lw=0.8, alpha=0.5, drawstyle=steps)
        won = [(int(r["env_steps"]), float(r[name])) for r in rows if r[name] not in ("", None)
               and int(r["member"]) == line[int(r["generation"])]]  # fmt: skip
        if won:
            ax.plot(*zip(*won, strict=True), color="black", lw=2.2, drawstyle=steps,
                    label="the winning lineage")  # fmt: skip
        ax.set_ylabel(name.split(".")[-1])
        if name != "score" and any(p.log for p in space if p.name == name):
            ax.set_yscale("log")
    axes[0].legend(loc="best", fontsize=8)
    axes[-1].set_xlabel("env steps per member")
    fig.suptitle(f"PBT: member {best} won; its lineage in black")
    fig.tight_layout()
    out = run_dir / "pbt.png"
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def run_population(argv_own: list[str], overrides: list[str],
                   say: Callable[[str], None] = print) -> PopulationResult:  # fmt: skip
    """``distrl train <task> --population N ...``: parse, check, and run or continue it."""
    args, base = parse(argv_own, overrides)
    from distrl.args import default_run_dir

    if base.run_dir is not None:
        run_dir = Path(base.run_dir)
    elif base.resume is None:
        run_dir = default_run_dir(f"pbt-{base.task}")
    else:
        raise ValueError("--resume auto needs --run-dir: the population's directory")
    from distrl.distributed.launch import strip_flags

    kept = strip_flags(overrides, ("--run-dir", "--resume"))
    return Controller(args, base, kept, run_dir, say).run()


def describe(result: PopulationResult) -> str:
    lines = [f"population {result.run_dir}: pbt.csv, pbt.png; each member in member_<k>/"]
    if result.interrupted:
        lines.append(
            f"interrupted by {result.interrupted}; continue with the same command and "
            f"--run-dir {result.run_dir} --resume auto"
        )
    elif result.best is not None:
        best = result.run_dir / f"member_{result.best}"
        lines.append(
            f"best: member {result.best}, score {_fmt(result.scores[result.best])}; its policy: "
            f"distrl play {best}"
        )
    return "\n".join(lines)


__all__ = ["DEFAULT_SPACES", "PopulationArgs", "run_population", "take_flags"]
