"""Interrupts that save: SIGINT (Ctrl-C) and SIGTERM stop training at an iteration boundary that
every rank agrees on, with one final checkpoint and one line that says how to resume.

Every signal of a run is handled here, in three places:

- **a training process** (``handling``, around ``session.run_training``): SIGINT and SIGTERM
  only note the first signal (``received``); nothing is raised, so no rank prints a traceback.
  The strategy reads the note in the exchange it already makes every iteration and every rank
  learns the same answer there, so all stop after the same iteration and the main rank writes
  the final checkpoint through ``Runner.checkpoint`` (``--resume auto`` finds it). Where the
  note travels, with no extra round trip:

  ==================  ==========================================================================
  strategy            the exchange
  ==================  ==========================================================================
  ``allreduce``       one more word in each rank's row of the ``reduce_stats`` all-gather
                      (``Collectives.reduce_stats``); every rank reads every rank's word, so
                      all decide alike, whichever rank the signal reached and when
  ``ps-*``            a worker's ``signal`` header field (``WorkerHeader``, every message); the
                      server (or its own note) answers the next statistics message with
                      ``stop`` (``ServerHeader.action``), one answer for a whole BSP round;
                      under ps-asp/bap each worker stops at its own next exchange
  ``learner-actor``   an actor's ``signal`` header field (``ActorHeader``) reaches its learner
                      with the rollout; the learners agree through their ``reduce_stats``
                      all-gather as allreduce does, and the weights they push next carry
                      ``stop`` (``LearnerHeader``): an actor then sends its state for that
                      iteration's checkpoint and stops
  ==================  ==========================================================================

  The note is read once per exchange: a signal that comes after this iteration's exchange
  stops the run after the next iteration. A single process (no process group) is the one the
  user talks to (``owner``): its first signal prints one line at once, and a second aborts it
  (the default action of the signal: no checkpoint). A rank under torchrun says nothing and
  takes a repeated signal as the same request (a scheduler may signal every process, and the
  launcher forwards once more): aborting is the launcher's job. A rank notes a signal from the
  first line of ``distrl.cli`` on (``note_early``), before its imports: one that comes while it
  is still starting stops the run after iteration 1, with that iteration's checkpoint.

- **the launcher** (``supervise``, ``distrl train --nproc N``): torchrun runs in a session of
  its own, so a terminal's Ctrl-C reaches the launcher alone; the launcher forwards SIGINT or
  SIGTERM (SIGHUP, its terminal closing, as SIGTERM) to the ranks themselves, torchrun's
  children (found in /proc; without it, torchrun itself), each once it catches the signal
  (``Relay``: a rank still starting, or not started yet, gets it a moment later; before its
  handler a signal would end it the default way, with a traceback, and torchrun would restart
  it as failed, the new rank never hearing of the stop). Were torchrun signalled instead, it
  would forward the signal too, but log three lines about it and raise, printing its traceback
  (``launch.main`` turns that into the signal's exit code). The ranks stop and exit 0 (so
  torchrun neither restarts them nor reports a failure), torchrun exits 0, and the launcher
  exits 128 + the signal. A second signal, or ``--stop-timeout`` seconds without the ranks
  gone, kills the whole tree (SIGKILL) with one line naming the newest checkpoint. torchrun's
  own grace before it SIGKILLs its workers (``--shutdown-timeout``, for a signal sent to
  torchrun itself) is set to the same ``--stop-timeout``.

  Ctrl-Z (SIGTSTP) to the launcher pauses the run (``pause``): the ranks stop themselves
  right after their next ``reduce_stats`` all-gather (``PAUSE`` in the interrupt word), then
  the whole tree and the launcher stop; SIGCONT continues them.

- **the final line** (``final_line``), printed by the main rank after the run summary.

A callback's stop (``Runner.request_stop``, a hook's ``after_iteration`` returning False) travels
the same way: ``request_stop`` takes a note that is no signal (``REQUEST``), every exchange above
carries it where it carries a signal (``note``), and the ranks agree on it as on a signal; a
signal outranks it (``merge``: it sets the exit code). The run then ends as at its last iteration,
with a final checkpoint and exit code 0, and says why (``stopped`` in the last record and in
``TrainResult.metrics``). One process has no one to agree with: it stops at once.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""What stops a training process at an iteration boundary."""

_first = 0  # the first signal this process received while training (0: none)
_early = 0  # the first signal a rank received before training (``note_early``; 0: none)
_request: str | None = None  # why a callback of this process asked the run to stop (None: no)

REQUEST = 0x100
"""The note of a stop request (``request_stop``): above every signal number, so never one."""

PAUSE = 0x200
"""Added to a rank's word in the ``reduce_stats`` all-gather when its launcher asked it to pause
(SIGTSTP): every rank that reads it stops itself there, with no collective under way."""
_pause = False  # SIGTSTP came from the launcher: pause at the next exchange

NOTES = frozenset({0, REQUEST, *(int(s) for s in SIGNALS)})
"""Every note a rank can send (``note``): none, a stop request, or a signal that stops a run. A
coordinator drops a peer whose message says anything else."""


def received() -> int:
    """The first SIGINT or SIGTERM this process received while training, or as a rank before
    (``note_early``) (0: none)."""
    return _first or _early


RANK_ENV = ("TORCHELASTIC_RUN_ID", "LOCAL_RANK")
"""Set for the processes a launcher starts (torchrun, or distrl's elastic launcher)."""


def note_early(argv: Sequence[str], environ: dict[str, str] | os._Environ[str]) -> bool:
    """A rank's first act (``distrl.cli`` on import, before its slow imports): in a ``train``
    process that a launcher started, SIGINT, SIGTERM and SIGHUP only note the first signal from
    here on, which ``handling`` takes over, so a signal that comes while the rank is still
    importing stops it at the first iteration boundary every rank agrees on (with that
    iteration's checkpoint) instead of ending it with a traceback (which torchrun took for a
    failure, and restarted the ranks). Returns whether it did."""
    command = [Path(argv[0]).name, *argv[1:2]] if argv else []
    if "train" not in command or not any(k in environ for k in RANK_ENV):
        return False
    if threading.current_thread() is not threading.main_thread():
        return False

    def on_signal(signum: int, frame: object) -> None:
        global _early
        if _early == 0:
            _early = signal.SIGTERM if signum == signal.SIGHUP else signum

    for s in (*SIGNALS, signal.SIGHUP):
        signal.signal(s, on_signal)
        signal.siginterrupt(s, False)
    return True


def request_stop(reason: str) -> None:
    """Ask the run to stop after an iteration every rank agrees on (the first reason stays)."""
    global _request
    if _request is None:
        _request = reason


def requested() -> str | None:
    """Why this process asked the run to stop (``request_stop``; None: it did not)."""
    return _request


def note() -> int:
    """What this process adds to the exchange: its first signal, else ``REQUEST`` once it asked
    to stop, else 0."""
    return _first or (REQUEST if _request is not None else 0)


def pause_word() -> int:
    """``PAUSE`` when this rank was asked to pause (SIGTSTP while training), else 0."""
    return PAUSE if _pause else 0


def pause_now() -> None:
    """Every rank read a ``PAUSE`` in the exchange just made: stop this process (SIGSTOP) until
    its launcher continues it (SIGCONT). Every rank stops right after the same collective, none
    waits inside one, so no --dist.timeout runs out however long the pause."""
    global _pause
    _pause = False
    os.kill(os.getpid(), signal.SIGSTOP)


def merge(agreed: int, other: int) -> int:
    """The note that stands once ``other`` joins ``agreed``: a signal outranks a stop request
    (it sets the exit code), and the first signal stays."""
    if agreed and agreed != REQUEST:
        return agreed
    return other or agreed


def is_signal(n: int) -> bool:
    """Whether an agreed note is a signal (not 0, not a stop request)."""
    return bool(n) and n != REQUEST


def name(signum: int) -> str:
    return signal.Signals(signum).name


def exit_code(signal_name: str | None) -> int:
    """0 without a signal; else what a shell reports for a process that signal ended, 128 + its
    number (130 for SIGINT, 143 for SIGTERM): the run stopped early, if cleanly."""
    return 128 + signal.Signals[signal_name] if signal_name else 0


def _say(text: str) -> None:
    """One line on stderr, written straight to the descriptor: safe inside a signal handler
    (a buffered print there can meet the stream mid-write and raise)."""
    with contextlib.suppress(OSError):
        os.write(2, (text + "\n").encode())


@contextlib.contextmanager
def handling(owner: bool, in_caller: bool = False) -> Iterator[None]:
    """While training: SIGINT and SIGTERM note the first signal (``received``); SIGHUP (the
    terminal closed) is noted as SIGTERM, as the launchers treat it. ``owner``: this process is
    the one the user talks to (a single process): say so at once, and let a second signal
    abort: the process ends by that signal, or, ``in_caller`` (``distrl.train`` from Python: a
    notebook's kernel), a second Ctrl-C raises KeyboardInterrupt in the calling program instead
    of ending it. The previous handlers come back afterwards. Outside the main thread (where
    Python cannot set handlers) nothing changes."""
    global _first, _request, _early, _pause
    _request = None  # a stop request is one run's
    if threading.current_thread() is not threading.main_thread():
        try:
            yield
        finally:
            _request = None
        return
    _first, _early = _early, 0  # a rank's signal before training (``note_early``) stands

    def on_signal(signum: int, frame: object) -> None:
        global _first
        if _first == 0:
            _first = signal.SIGTERM if signum == signal.SIGHUP else signum
            if owner:
                again = "Ctrl-C" if signum == signal.SIGINT else name(signum)
                _say(
                    f"distrl: {name(signum)}: stopping at the next iteration boundary to save a "
                    f"final checkpoint ({again} again aborts without saving)"
                )
        elif owner:
            _say(f"distrl: second {name(signum)}: aborting without a final checkpoint")
            if in_caller and signum == signal.SIGINT:
                raise KeyboardInterrupt  # the caller's to handle; its process goes on
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    def on_pause(signum: int, frame: object) -> None:
        global _pause  # SIGTSTP: pause at the next exchange; SIGCONT: go on, paused or not
        _pause = signum == signal.SIGTSTP

    handled = (*SIGNALS, signal.SIGHUP)
    paused = (signal.SIGTSTP, signal.SIGCONT)
    previous = {s: signal.getsignal(s) for s in (*handled, *paused)}
    for s in paused if not owner else ():  # a rank: its launcher's Ctrl-Z, at an exchange
        signal.signal(s, on_pause)
        signal.siginterrupt(s, False)
    for s in handled:
        signal.signal(s, on_signal)
        # Restart system calls the signal interrupts, in threads Python does not run either
        # (Gloo's, the TCP store's): the handler only takes a note.
        signal.siginterrupt(s, False)
    try:
        yield
    finally:
        _first, _request, _pause = 0, None, False
        for s, handler in previous.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)


# ---- what the main rank says at the end -------------------------------------------------------


def resume_command(run_dir: str | Path, modules: Sequence[str] = ()) -> str:
    """The command that continues the run in ``run_dir``: its config.yaml repeats every setting
    (the process count too), ``--resume auto`` takes the newest valid checkpoint."""
    words = ["distrl", "train"]
    for m in modules:
        words += ["--import", m]
    config = Path(run_dir) / "config.yaml"
    words += ["--config", str(config), "--resume", "auto", "--run-dir", str(run_dir)]
    return shlex.join(words)


def final_line(
    signum: int,
    iteration: int,
    checkpoint: Path | None,
    run_dir: str | Path,
    modules: Sequence[str] = (),
) -> str:
    """``interrupted by SIGTERM at iteration 37; final checkpoint ...; resume with: ...``"""
    if checkpoint is None:
        saved = "no checkpoint was written"
    elif f"{iteration:08d}" in checkpoint.name:
        saved = f"final checkpoint {checkpoint}"
    else:  # the final save was refused (updates skipped for NaN/Inf): say which one is newest
        saved = f"no checkpoint of iteration {iteration}; the newest is {checkpoint}"
    return (
        f"interrupted by {name(signum)} at iteration {iteration}; {saved}; resume with: "
        f"{resume_command(run_dir, modules)}"
    )


# ---- the launcher -----------------------------------------------------------------------------


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux: /proc; elsewhere none are found)."""
    out: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            out.append(int(entry))
    return out


def tree(pid: int) -> list[int]:
    """``pid`` and every process below it, parents first."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop(0)
        out.append(p)
        todo += children(p)
    return out


def _kill(pids: Sequence[int], signum: int) -> None:
    for p in pids:
        with contextlib.suppress(OSError):
            os.kill(p, signum)


def _read(pid: int, what: str) -> bytes | None:
    try:
        with open(f"/proc/{pid}/{what}", "rb") as f:
            return f.read()
    except OSError:
        return None


def takes_signals(pid: int) -> bool:
    """Whether process ``pid`` is ready for a stop: it runs its own program (no longer its
    launcher's fork before the exec) and catches SIGTERM, which a rank does from its first line
    on (``note_early``) and Python does not by default. A signal before that would end it the
    default way. Without /proc (not Linux): always."""
    status, cmdline, stat = _read(pid, "status"), _read(pid, "cmdline"), _read(pid, "stat")
    if status is None or cmdline is None or stat is None:
        return not os.path.isdir("/proc/self")
    parent = _read(int(stat[stat.rfind(b")") + 2 :].split()[1]), "cmdline")
    return cmdline != parent and _caught(pid, signal.SIGTERM, status)


def _caught(pid: int, signum: int, status: bytes | None = None) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (/proc/PID/status, SigCgt)."""
    status = status if status is not None else _read(pid, "status") or b""
    caught = next((ln.split()[1] for ln in status.splitlines() if ln.startswith(b"SigCgt:")), b"0")
    return bool(int(caught, 16) >> (signum - 1) & 1)


class Relay:
    """A launcher's stop, passed on to each rank process once it can take it
    (``takes_signals``): a rank still starting gets it a moment later (``pass_on`` again), a
    rank started after it (a restart) gets it too."""

    def __init__(self) -> None:
        self.signum = 0
        self.reached: set[int] = set()

    def pass_on(self, pids: Sequence[int]) -> None:
        ready = [p for p in pids if p not in self.reached and takes_signals(p)]
        _kill(ready, self.signum)
        self.reached.update(ready)


PAUSE_GRACE = 30.0
"""Seconds a launcher waits, after Ctrl-Z, for its ranks to pause at their next exchange
before it stops them wherever they are."""


def _state(pid: int) -> bytes:
    stat = _read(pid, "stat") or b") X"
    return stat[stat.rfind(b")") + 2 :].split()[0]


def pause(ranks: Sequence[int], everything: Callable[[], list[int]]) -> None:
    """Ctrl-Z (SIGTSTP) to a launcher: pause the run, then this process; its SIGCONT handler
    continues them all (``fg``, ``kill -CONT``). The ranks (``ranks``) get SIGTSTP: at their
    next ``reduce_stats`` exchange every rank reads the pause and stops itself there
    (``pause_now``), so none waits inside a collective whose deadline would pass during the
    pause. After that, or ``PAUSE_GRACE`` s (a strategy without that exchange: a rank may then
    be stopped inside one), every process of the run (``everything()``: torchrun, the ranks,
    their env subprocesses, all in sessions of their own, out of the terminal's reach) gets
    SIGSTOP, and so does this process: SIGTSTP's default is ignored in a process group with no
    parent in its session (one started with ``setsid``). Stopped alone, the launcher held the
    rendezvous store that torchrun and the ranks wait on, while the ranks trained on."""
    asked = [r for r in ranks if _caught(r, signal.SIGTSTP)]
    _kill(asked, signal.SIGTSTP)
    deadline = time.monotonic() + PAUSE_GRACE
    while any(_state(r) not in (b"T", b"t", b"Z", b"X") for r in asked):
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    _kill(everything(), signal.SIGSTOP)
    os.kill(os.getpid(), signal.SIGSTOP)


def final_code(first: int, code: int, killed: bool = False) -> int:
    """A launcher's exit code: 128 + the signal that stopped the run (``first``) when its
    ranks ended as a stop ends them (torchrun's ``code`` 0, or the signal's own, or the
    SIGKILL the launcher sent them: ``killed``), else the ranks' ``code``: a rank that crashed
    while stopping is a failure, not an interrupt."""
    if not first:
        return code
    stopped = exit_code(name(first))
    return stopped if killed or code in (0, stopped, -first) else code


def supervise(
    cmd: list[str],
    env: dict[str, str],
    stop_timeout: float,
    run_dir: str | Path,
    modules: Sequence[str] = (),
    start: Callable[[list[str], dict[str, str]], subprocess.Popen] | None = None,
) -> int:
    """Run torchrun (``cmd``) in a session of its own and wait for it, passing the launcher's
    SIGINT, SIGTERM and SIGHUP on to the ranks (see the module docstring); returns torchrun's
    exit code, or 128 + the signal after an interrupt. ``start``: what starts ``cmd`` with
    ``env`` in a session of its own (default: a new process; ``EarlyTorchrun.go``, in
    ``distributed/early_torchrun.py``: one started before the command's imports)."""
    from distrl import checkpoint as ckpt

    proc: subprocess.Popen | None = None
    first = 0
    killed = False
    deadline = float("inf")
    relay = Relay()

    def forward(signum: int) -> None:
        """To the ranks, torchrun's children, each once it has its handlers (a rank still
        importing, or started later, gets it at a later call); never to torchrun, whose
        restart would bring ranks that never heard of the stop. Without /proc (the ranks
        cannot be found), to torchrun, which passes it on (``launch.main``)."""
        if proc is None:
            return
        relay.signum = signum
        relay.pass_on(children(proc.pid) if os.path.isdir("/proc/self") else [proc.pid])

    def kill_tree() -> None:
        nonlocal killed
        if proc is not None:
            killed = True
            _kill(tree(proc.pid), signal.SIGKILL)

    def newest() -> str:
        path, _ = ckpt.find_latest_valid(Path(run_dir) / "checkpoints")
        return f"the newest checkpoint is {path}" if path else "no checkpoint was written"

    def on_signal(signum: int, frame: object) -> None:
        nonlocal first, deadline
        sent = signal.SIGTERM if signum == signal.SIGHUP else signum
        if first == 0:
            first, deadline = sent, time.monotonic() + stop_timeout
            again = "Ctrl-C" if sent == signal.SIGINT else "another signal"
            _say(
                f"distrl: {name(signum)}: the ranks stop at the next iteration boundary and save "
                f"a final checkpoint ({again} kills them without saving)"
            )
            forward(sent)
            return
        kill_tree()
        _say(
            f"distrl: second {name(signum)}: killed the ranks without a final checkpoint; "
            f"{newest()}; resume with: {resume_command(run_dir, modules)}"
        )

    def on_pause(signum: int, frame: object) -> None:
        if proc is None:
            return
        if signum == signal.SIGTSTP:  # the ranks at their next exchange, then everything
            pause(children(proc.pid), lambda: tree(proc.pid) if proc is not None else [])
        else:  # SIGCONT: the launcher goes on, so does the run
            _kill(tree(proc.pid), signal.SIGCONT)

    # Python sets handlers in the main thread only: from another (distrl.train(nproc=N) in a
    # thread) the launcher runs without them, and a signal reaches the process as it would
    main = threading.current_thread() is threading.main_thread()
    handled = (*SIGNALS, signal.SIGHUP) if main else ()
    paused = (signal.SIGTSTP, signal.SIGCONT) if main else ()
    previous = {s: signal.getsignal(s) for s in (*handled, *paused)}
    for s in handled:
        signal.signal(s, on_signal)
        signal.siginterrupt(s, False)
    for s in paused:
        signal.signal(s, on_pause)
        signal.siginterrupt(s, False)
    try:
        if start is not None:
            proc = start(cmd, env)
        else:
            proc = subprocess.Popen(cmd, env=env, start_new_session=True)
        if first:  # a signal came while torchrun was being started
            forward(first)
        while True:
            try:
                tick = 0.1 if first and not killed else 1.0  # stopping: reach new ranks soon
                code = proc.wait(timeout=max(0.0, min(deadline - time.monotonic(), tick)))
                break
            except subprocess.TimeoutExpired:
                if first and not killed:
                    forward(first)
                if time.monotonic() >= deadline:
                    kill_tree()
                    _say(
                        f"distrl: the ranks did not stop within --stop-timeout {stop_timeout:g} s "
                        f"of {name(first)}; killed them; {newest()}; resume with: "
                        f"{resume_command(run_dir, modules)}"
                    )
                    deadline = float("inf")
        return final_code(first, code, killed)
    finally:
        if proc is not None and proc.poll() is None:  # the launcher itself failed: no orphans
            kill_tree()
            proc.wait()
        for s, handler in previous.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
