"""Interrupts that save (``distrl.interrupts``): SIGINT or SIGTERM sent to `distrl train` (the
launcher of `--nproc 2`, or a single process), to torchrun, or to one rank stops every rank at
the same iteration boundary; one final checkpoint is written, no process of the tree is left,
one line says what happened and how to resume, and that command continues bit for bit as the
uninterrupted run.

The runs train ``pause-cartpole`` (tests/fixtures/pause.py): one rank holds at the update of
iteration ``PAUSE_AT`` until the signal reaches it, so the test sends its signal while the whole
tree is up and the run stops after iteration ``PAUSE_AT + 1`` whichever process the signal
went to. Periodic checkpoints come every 2 iterations, so the final one (3) is later than the
last periodic one (2). The 2-rank runs repeat the session's uninterrupted `--nproc 2` run
(``two_rank_reference``, 6 iterations) with the fixture's task, as the elastic-restart test
does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from distrl import checkpoint as ckpt
from distrl import interrupts
from distrl.args import parse_train_args
from distrl.runner.hooks import Hooks
from distrl.session import run_training
from tests.fixtures import pause
from tests.helpers import BIN, assert_same, final_state, run_main, tiny_train_args
from tests.reliability.conftest import TWO_RANK_ARGS, TWO_RANK_ITERS, two_rank_command
from tests.reliability.workers import cli_env, run_cli

PAUSE_AT = 2  # the paused rank holds in iteration 2's update: the run stops at iteration 3
STOP_BOUND = 30.0  # seconds from the signal to the launcher's exit (it takes ~2 s here)
LINE = re.compile(
    r"^interrupted by (SIG\w+) at iteration (\d+); final checkpoint (\S+); resume with: (.+)$"
)


# ---- helpers ----------------------------------------------------------------------------------

FROM_A_TERMINAL = [
    sys.executable,
    "-c",
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.argv[1], sys.argv[1:])",
]
"""A command's prefix: it runs with SIGINT's default action, as a terminal starts it."""


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] not in (b"Z", b"X")


class Launch:
    """`distrl train ...` in its own session, output to files; the pause fixture armed."""

    def __init__(self, cmd: list[str], tmp: Path, rank: int = 0, **env: str):
        self.marker, self.tmp = tmp / "paused", tmp
        self.out, self.err = tmp / "stdout", tmp / "stderr"
        env = cli_env(
            DISTRL_TEST_PAUSE_AT_ITERATION=str(PAUSE_AT),
            DISTRL_TEST_PAUSE_RANK=str(rank),
            DISTRL_TEST_PAUSE_MARKER=str(self.marker),
            **env,
        )
        with self.out.open("w") as out, self.err.open("w") as err:
            self.proc = subprocess.Popen(
                cmd, stdout=out, stderr=err, env=env, start_new_session=True
            )

    def paused(self, timeout: float = 60.0) -> tuple[int, list[int]]:
        """(the paused rank's pid, the whole process tree) once the fixture holds."""
        deadline = time.monotonic() + timeout
        while not self.marker.exists() or not self.marker.read_text().endswith("\n"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"never paused (exit {self.proc.poll()})\n{self.output()}")
            time.sleep(0.05)
        return int(self.marker.read_text()), interrupts.tree(self.proc.pid)

    def stop(self, pid: int, signum: int) -> tuple[int, float]:
        """Send ``signum`` to ``pid``; (the launcher's exit code, seconds until it exited)."""
        t0 = time.monotonic()
        os.kill(pid, signum)
        try:
            code = self.proc.wait(timeout=STOP_BOUND)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"still running {STOP_BOUND} s after the signal") from None
        return code, time.monotonic() - t0

    def kill(self) -> None:
        for p in reversed(interrupts.tree(self.proc.pid)):
            with contextlib.suppress(OSError):  # it may have exited meanwhile
                os.kill(p, signal.SIGKILL)
        self.proc.wait()

    def output(self) -> str:
        return self.out.read_text() + self.err.read_text()


def rank_of(pid: int) -> int:
    """The torchrun rank of process ``pid`` (-1: none)."""
    env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return next((int(v[5:]) for v in env if v.startswith(b"RANK=")), -1)


def check_interrupted(
    launch: Launch, tree: list[int], signum: int, secs: float, at: int = PAUSE_AT + 1
) -> tuple[Path, str]:
    """Everything but the resume (the run stopped at iteration ``at``); returns (the checkpoint
    the line names, the resume command)."""
    out = launch.output()
    print(f"stopped {secs:.1f} s after {signal.Signals(signum).name}")
    assert "Traceback" not in out, out
    lines = [m for m in map(LINE.match, launch.out.read_text().splitlines()) if m]
    assert len(lines) == 1, out  # one line says what happened and how to resume
    name, iteration, path, command = lines[0].groups()
    assert (name, int(iteration)) == (signal.Signals(signum).name, at), out
    # the periodic checkpoints (every 2) and the final one, and no other after it
    names = sorted(p.name for p in ckpt.list_checkpoints(Path(path).parent))
    assert names == [f"ckpt_{i:08d}.pt" for i in sorted({*range(2, at + 1, 2), at})], names
    ckpt.load_checkpoint(Path(path))  # valid (sha256 checked)
    assert [p for p in tree if alive(p)] == [], tree  # no process of the tree is left
    return Path(path), command


def resume(command: str, timeout: float = 90) -> str:
    """Run the command the line printed (``distrl`` from this environment)."""
    words = shlex.split(command)
    assert words[0] == "distrl"
    code, out, err, secs = run_cli([str(BIN / "distrl"), *words[1:]], timeout=timeout)
    print(f"resume: {secs:.1f} s")
    assert code == 0, out + err
    return out


# ---- 2 ranks under the launcher ---------------------------------------------------------------


def launch_two(tmp_path: Path, rank: int = 0) -> Launch:
    return Launch(pause.command(two_rank_command(tmp_path / "run")), tmp_path, rank)


@pytest.mark.slow  # a 2-rank launch stopped, then its resume: ~20 s
@pytest.mark.timeout(150)
@pytest.mark.parametrize(
    "signum",
    [
        pytest.param(signal.SIGINT, id="SIGINT"),
        pytest.param(signal.SIGTERM, id="SIGTERM", marks=pytest.mark.long),  # the same path
    ],
)
def test_a_signal_to_the_launcher_stops_both_ranks_saves_and_resumes_bitwise(
    signum, two_rank_reference, tmp_path
):
    launch = launch_two(tmp_path, rank=1)  # rank 1 holds: rank 0 learns it from the exchange
    _, tree = launch.paused()
    assert len(tree) == 4, tree  # launcher, torchrun, 2 ranks
    code, secs = launch.stop(launch.proc.pid, signum)
    assert code == 128 + signum, launch.output()
    ack = launch.err.read_text()
    assert f"distrl: {signal.Signals(signum).name}: the ranks stop" in ack, ack
    _, command = check_interrupted(launch, tree, signum, secs)
    assert command.endswith(f"--resume auto --run-dir {tmp_path / 'run'}"), command

    out = resume(command)
    assert "resume: loaded" in out and f"at iteration {PAUSE_AT + 1}" in out, out
    assert_same(
        final_state(tmp_path / "run", TWO_RANK_ITERS, world_size=2),
        final_state(two_rank_reference, TWO_RANK_ITERS),
    )


@pytest.mark.slow  # a 2-rank launch stopped at iteration 1: ~10 s
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "launcher",
    [
        pytest.param("torchrun", id="torchrun", marks=pytest.mark.long),  # ~9 s
        pytest.param("elastic", id="elastic", marks=pytest.mark.long),  # the same relay
    ],
)
def test_ctrl_c_while_the_ranks_import_stops_at_iteration_1_without_a_restart(launcher, tmp_path):
    """Both ranks hold while importing (the fixture) when the launcher gets SIGINT, with
    --max-restarts 2: they died with KeyboardInterrupt tracebacks, torchrun restarted them and
    the new ranks trained on until --stop-timeout killed them. Now each rank notes the signal
    from its first line, and the ranks stop after iteration 1 with its checkpoint."""
    importing = tmp_path / "importing"
    extra = ["--stop-timeout", "60"]
    extra += ["--dist.strategy", "elastic"] if launcher == "elastic" else []
    cmd = pause.command(two_rank_command(tmp_path / "run", *extra))
    launch = Launch(cmd, tmp_path, DISTRL_TEST_HOLD_IMPORT_MARKER=str(importing))
    deadline = time.monotonic() + 60
    while len(importing.read_text().split() if importing.exists() else []) < 2:
        if launch.proc.poll() is not None or time.monotonic() > deadline:
            launch.kill()
            raise AssertionError(f"the ranks never imported\n{launch.output()}")
        time.sleep(0.05)
    tree = interrupts.tree(launch.proc.pid)
    assert len(tree) == 4, tree  # launcher, torchrun (elastic: the spare), 2 ranks
    code, secs = launch.stop(launch.proc.pid, signal.SIGINT)
    assert code == 130, launch.output()
    check_interrupted(launch, tree, signal.SIGINT, secs, at=1)
    assert len(importing.read_text().split()) == 2, launch.output()  # no rank started again


@pytest.mark.timeout(60)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
def test_a_signal_while_the_launcher_imports_leaves_no_process(signum, tmp_path):
    """The launcher of `--nproc 2` starts torchrun's process before its own imports
    (``early_torchrun.prestart``); a Ctrl-C then ends both with one line and the shell's status for
    Ctrl-C, and a launcher killed outright leaves the early process to exit at its pipe's end.
    The launcher starts as from a terminal, SIGINT not ignored: a process started in the
    background of a script inherits SIGINT ignored, which Python keeps while it imports."""
    launch = Launch(FROM_A_TERMINAL + two_rank_command(tmp_path / "run"), tmp_path)
    deadline = time.monotonic() + 30
    while len(tree := interrupts.tree(launch.proc.pid)) < 2:  # the early torchrun is up
        if launch.proc.poll() is not None or time.monotonic() > deadline:
            launch.kill()
            raise AssertionError(f"no early torchrun\n{launch.output()}")
        time.sleep(0.02)
    code, _ = launch.stop(launch.proc.pid, signum)
    assert code == -signum, launch.output()
    while [p for p in tree if alive(p)] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p for p in tree if alive(p)] == [], tree
    if signum == signal.SIGINT:
        assert launch.err.read_text().strip() == "distrl: interrupted", launch.output()
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.long  # another 2-rank launch and resume: ~20 s
@pytest.mark.timeout(150)
def test_a_signal_to_one_rank_stops_both_and_resumes_bitwise(two_rank_reference, tmp_path):
    """SIGTERM to rank 1 alone: its note reaches rank 0 in the all-gather; both stop at 3.
    torchrun saw both ranks finish, so the launcher exits 0."""
    launch = launch_two(tmp_path, rank=1)
    rank1, tree = launch.paused()
    code, secs = launch.stop(rank1, signal.SIGTERM)
    assert code == 0, launch.output()
    _, command = check_interrupted(launch, tree, signal.SIGTERM, secs)
    resume(command)
    assert_same(
        final_state(tmp_path / "run", TWO_RANK_ITERS),
        final_state(two_rank_reference, TWO_RANK_ITERS),
    )


@pytest.mark.long  # a 2-rank launch: ~10 s
@pytest.mark.timeout(120)
def test_a_signal_to_torchrun_stops_the_ranks_without_its_traceback(tmp_path):
    """torchrun passes SIGINT on to its workers itself (then its 3 log lines), and the
    launcher's torchrun (``launch.main``) exits 130 instead of printing a traceback."""
    launch = launch_two(tmp_path, rank=1)
    rank1, tree = launch.paused()
    agent = next(p for p in tree if rank1 in interrupts.children(p))
    code, secs = launch.stop(agent, signal.SIGINT)
    assert code == 130, launch.output()
    check_interrupted(launch, tree, signal.SIGINT, secs)


@pytest.mark.long  # a 2-rank launch: ~10 s
@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["second Ctrl-C", "--stop-timeout"])
def test_a_second_ctrl_c_or_the_stop_timeout_kills_the_ranks_without_saving(how, tmp_path):
    """The ranks are stopped (SIGSTOP) before the first SIGINT, so they cannot save: a second
    SIGINT, or --stop-timeout 2 passing, kills the whole tree at once."""
    cmd = pause.command(two_rank_command(tmp_path / "run"))
    cmd = [*cmd, "--stop-timeout", "2"] if how == "--stop-timeout" else cmd
    launch = Launch(cmd, tmp_path, 0)  # rank 0 holds: it has written checkpoint 2
    _, tree = launch.paused()
    for p in tree[2:]:  # the ranks (after the launcher and torchrun)
        os.kill(p, signal.SIGSTOP)
    if how == "second Ctrl-C":
        os.kill(launch.proc.pid, signal.SIGINT)
        deadline = time.monotonic() + 10  # the first handled: two pending signals are one
        while "the ranks stop" not in launch.err.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
    code, secs = launch.stop(launch.proc.pid, signal.SIGINT)
    print(f"{how}: the launcher exited {secs:.1f} s after the last SIGINT")
    assert code == 130, launch.output()
    err = launch.err.read_text()
    said = {
        "second Ctrl-C": "distrl: second SIGINT: killed the ranks without a final checkpoint",
        "--stop-timeout": "the ranks did not stop within --stop-timeout 2 s of SIGINT; killed",
    }
    assert said[how] in err, err
    assert "ckpt_00000002.pt; resume with: distrl train" in err, err
    names = [p.name for p in ckpt.list_checkpoints(tmp_path / "run" / "checkpoints")]
    assert names == ["ckpt_00000002.pt"]
    deadline = time.monotonic() + 10  # SIGKILLed: gone once the kernel has reaped them
    while any(alive(p) for p in tree) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p for p in tree if alive(p)] == [], tree


def state(pid: int) -> str:
    """The process state letter of ``pid`` (/proc/PID/stat: R, S, T stopped, Z, ...)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return "gone"
    return stat[stat.rfind(b")") + 2 :].split()[0].decode()


PAUSE_TIMEOUT = 3  # --dist.timeout of the paused run: the pause lasts longer


@pytest.mark.long  # a 2-rank launch paused for 10 s: ~25 s
@pytest.mark.timeout(180)
def test_ctrl_z_pauses_the_whole_tree_and_sigcont_resumes_it_to_the_end(tmp_path):
    """SIGTSTP (Ctrl-Z) to the launcher stopped it alone: the ranks trained on, and the
    launcher, which hosts the rendezvous store, left torchrun waiting on it; a minute later
    SIGCONT ended the run with tracebacks. Now the whole tree stops (state T), through a pause
    longer than --dist.timeout, and SIGCONT lets the run finish as if nothing happened."""
    cmd = pause.command(two_rank_command(tmp_path / "run", "--dist.timeout", str(PAUSE_TIMEOUT)))
    # rank 1 sleeps 1 s in iteration 2's update while rank 0 waits for it in the all-reduce:
    # the pause comes while a collective is under way
    launch = Launch(cmd, tmp_path, rank=1, DISTRL_TEST_PAUSE_HOLD="1")
    _, tree = launch.paused()
    os.kill(launch.proc.pid, signal.SIGTSTP)
    deadline = time.monotonic() + 10
    while {state(p) for p in tree} != {"T"} and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(3 * PAUSE_TIMEOUT)
    states = {p: state(p) for p in tree}
    os.kill(launch.proc.pid, signal.SIGCONT)
    assert set(states.values()) == {"T"}, (states, launch.output())
    try:
        code = launch.proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        launch.kill()
        raise AssertionError(f"did not finish after SIGCONT\n{launch.output()}") from None
    assert code == 0, launch.output()
    out = launch.output()
    assert "Traceback" not in out and "resume: loaded" not in out, out  # no failure, no restart
    names = sorted(p.name for p in ckpt.list_checkpoints(tmp_path / "run" / "checkpoints"))
    assert names[-1] == f"ckpt_{TWO_RANK_ITERS:08d}.pt", names


# (extra flags, processes, the rank that holds, the rank signalled, hold seconds, stop iteration)
STRATEGIES = {
    # worker 2 alone is signalled: the server answers both workers' statistics with stop
    "ps-bsp": (["--dist.strategy", "ps-bsp"], 3, 2, 2, None, 3),
    # the actor alone: its next rollout (of iteration 3) tells the learner, whose weights of
    # version 4 tell the actor to send its state and stop
    "learner-actor": (["--dist.strategy", "learner-actor"], 2, 0, 1, "3", 4),
}


@pytest.mark.long  # three launches of 2 or 3 ranks per strategy: ~40 s each
@pytest.mark.timeout(300)
@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_a_signal_to_one_rank_stops_every_strategy_together_and_resumes_bitwise(strategy, tmp_path):
    flags, nproc, holds, signalled, hold, at = STRATEGIES[strategy]

    def command(run_dir: Path) -> list[str]:
        args = ["--nproc", str(nproc), "--run-dir", str(run_dir), *TWO_RANK_ARGS, *flags]
        return [str(BIN / "distrl"), "train", "cartpole", *args]

    code, out, err, secs = run_cli(command(tmp_path / "reference"), timeout=120)
    print(f"uninterrupted: {secs:.1f} s")
    assert code == 0, out + err
    extra = {"DISTRL_TEST_PAUSE_HOLD": hold} if hold else {}
    launch = Launch(pause.command(command(tmp_path / "run")), tmp_path, holds, **extra)
    _, tree = launch.paused()
    target = next(p for p in tree if rank_of(p) == signalled)
    code, secs = launch.stop(target, signal.SIGTERM)
    assert code == 0, launch.output()
    _, command_line = check_interrupted(launch, tree, signal.SIGTERM, secs, at)
    resume(command_line)
    assert_same(
        final_state(tmp_path / "run", TWO_RANK_ITERS, world_size=nproc),
        final_state(tmp_path / "reference", TWO_RANK_ITERS),
    )


# ---- one process --------------------------------------------------------------------------------

ONE_ARGS = [*TWO_RANK_ARGS]  # the same tiny config, one process


@pytest.fixture(scope="module")
def one_process_reference(tmp_path_factory) -> dict:
    run_dir = tmp_path_factory.mktemp("one_process_reference")
    run_training(parse_train_args(["cartpole", *ONE_ARGS, "--run-dir", str(run_dir)]))
    return final_state(run_dir, TWO_RANK_ITERS)


@pytest.mark.slow  # a process started and stopped: ~5 s
@pytest.mark.timeout(120)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_to_one_process_saves_and_resumes_bitwise(
    signum, one_process_reference, tmp_path, capsys
):
    cmd = [str(BIN / "distrl"), "train", "cartpole", *ONE_ARGS, "--run-dir", str(tmp_path / "run")]
    launch = Launch(pause.command(cmd), tmp_path)
    pid, tree = launch.paused()
    assert tree == [pid] == [launch.proc.pid]
    code, secs = launch.stop(pid, signum)
    assert code == 128 + signum, launch.output()
    again = "Ctrl-C" if signum == signal.SIGINT else "SIGTERM"
    assert f"({again} again aborts without saving)" in launch.err.read_text()
    _, command = check_interrupted(launch, tree, signum, secs)
    words = shlex.split(command)  # run here: a process would spend seconds importing torch
    assert words[:2] == ["distrl", "train"], command
    code, out, err = run_main(words[1:], capsys)
    assert code == 0 and f"resume: loaded {tmp_path / 'run'}" in out, out + err
    assert_same(final_state(tmp_path / "run", TWO_RANK_ITERS), one_process_reference)


@pytest.mark.slow  # a process with 2 env subprocesses started and stopped: ~5-10 s
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "method",
    [
        pytest.param("fork", id="fork"),
        pytest.param("forkserver", id="forkserver", marks=pytest.mark.long),
        pytest.param("spawn", id="spawn", marks=pytest.mark.long),
    ],
)
def test_ctrl_c_to_one_process_with_async_envs_stops_once_and_saves(method, tmp_path):
    """A terminal's Ctrl-C reaches the whole foreground process group, the env subprocesses of
    `--env.vectorization async` too: under forkserver and spawn they died of KeyboardInterrupt
    and the run crashed (exit 1, no checkpoint); under fork each ran the parent's handler and
    printed the stop line. They ignore SIGINT now (the parent stops them)."""
    cmd = [str(BIN / "distrl"), "train", "cartpole", *ONE_ARGS, "--run-dir", str(tmp_path / "run")]
    cmd = pause.command([*cmd, "--env.vectorization", "async", "--env.num-envs", "2"],
                        pause.GYM_TASK)  # fmt: skip
    # the hook holds 2 s whatever comes: a subprocess the signal ended is gone by then
    launch = Launch(cmd, tmp_path, DISTRL_TEST_START_METHOD=method, DISTRL_TEST_PAUSE_HOLD="2")
    pid, tree = launch.paused()
    assert len(interrupts.children(pid)) >= 2, tree  # the env subprocesses
    t0 = time.monotonic()
    os.killpg(pid, signal.SIGINT)  # as a terminal's Ctrl-C: every process of the group
    code = launch.proc.wait(timeout=STOP_BOUND)
    assert code == 130, launch.output()
    assert launch.err.read_text().count("distrl: SIGINT: stopping") == 1, launch.output()
    deadline = time.monotonic() + 10  # the forkserver and resource tracker follow their parent
    while any(alive(p) for p in tree) and time.monotonic() < deadline:
        time.sleep(0.05)
    check_interrupted(launch, tree, signal.SIGINT, time.monotonic() - t0)


@pytest.mark.long  # a process started and aborted: ~5 s
@pytest.mark.timeout(60)
def test_a_second_ctrl_c_aborts_one_process_at_once(tmp_path):
    """The hook holds 20 s whatever comes: the first SIGINT cannot end the iteration, the second
    ends the process by SIGINT's default action."""
    cmd = [str(BIN / "distrl"), "train", "cartpole", *ONE_ARGS, "--run-dir", str(tmp_path / "run")]
    launch = Launch(pause.command(cmd), tmp_path, DISTRL_TEST_PAUSE_HOLD="20")
    pid, _ = launch.paused()
    os.kill(pid, signal.SIGINT)
    deadline = time.monotonic() + 10
    while "stopping at the next" not in launch.err.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    code, secs = launch.stop(pid, signal.SIGINT)
    assert code == -signal.SIGINT and secs < 10, launch.output()
    assert "distrl: second SIGINT: aborting without a final checkpoint" in launch.err.read_text()
    names = [p.name for p in ckpt.list_checkpoints(tmp_path / "run" / "checkpoints")]
    assert names == ["ckpt_00000002.pt"]


# ---- in this process: the runner's side, the episodic runner too --------------------------------


class SignalAt(Hooks):
    """Send this process ``signum`` in the update of iteration ``at`` (once)."""

    def __init__(self, at: int, signum: int = signal.SIGTERM):
        self.at, self.signum, self.sent = at, signum, False

    def before_update(self, runner) -> None:
        if runner.iteration == self.at and not self.sent:
            self.sent = True
            os.kill(os.getpid(), self.signum)


@pytest.mark.timeout(60)
def test_in_process_training_stops_saves_and_restores_the_handlers(tmp_path, capsys):
    before = signal.getsignal(signal.SIGTERM)
    cfg = parse_train_args(["cartpole", *tiny_train_args(8), "--run-dir", str(tmp_path)])
    final = run_training(cfg, hooks=[SignalAt(1)])
    assert final["interrupted"] == "SIGTERM" and final["iteration"] == 2
    assert signal.getsignal(signal.SIGTERM) is before and interrupts.received() == 0
    out = capsys.readouterr().out
    assert f"interrupted by SIGTERM at iteration 2; final checkpoint {tmp_path}" in out, out
    assert ckpt.find_latest_valid(tmp_path / "checkpoints")[0].name == "ckpt_00000002.pt"


@pytest.mark.timeout(60)
def test_a_hangup_stops_one_process_as_sigterm_does_with_its_checkpoint(tmp_path, capsys):
    """SIGHUP (its terminal closed) ended a one-process run without a final checkpoint."""
    before = signal.getsignal(signal.SIGHUP)
    cfg = parse_train_args(["cartpole", *tiny_train_args(8), "--run-dir", str(tmp_path)])
    final = run_training(cfg, hooks=[SignalAt(1, signal.SIGHUP)])
    assert final["interrupted"] == "SIGTERM" and final["iteration"] == 2
    assert signal.getsignal(signal.SIGHUP) is before
    assert ckpt.find_latest_valid(tmp_path / "checkpoints")[0].name == "ckpt_00000002.pt"


class TwoCtrlC(Hooks):
    """Two SIGINTs in the update of iteration 1, as a user's impatient second Ctrl-C."""

    def before_update(self, runner) -> None:
        if runner.iteration == 1:
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)


@pytest.mark.timeout(60)
def test_a_second_ctrl_c_in_distrl_train_raises_in_the_caller(tmp_path):
    """From Python (a notebook), the second Ctrl-C ended the calling process; it raises
    KeyboardInterrupt there now, and the caller goes on."""
    import distrl

    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        distrl.train("cartpole", run_dir=str(tmp_path), env={"num_envs": 8},
                     agent={"num_steps": 8, "max_iterations": 4}, threads=1, progress=False,
                     tensorboard=False, hooks=[TwoCtrlC()])  # fmt: skip
    assert signal.getsignal(signal.SIGINT) is before  # the handlers came back


@pytest.mark.timeout(90)
def test_the_episodic_runner_stops_saves_and_resumes_bitwise(tmp_path, capsys):
    """reach10 (multi-task RLOO) goes through the same role loop and exchange."""
    from tests.distributed.episodic_workers import tiny_config

    def cfg(run_dir: Path, iterations: int, resume: str | None = None):
        c = tiny_config(2, 1)
        agent = dataclasses.replace(c.agent, max_iterations=iterations)
        return dataclasses.replace(c, agent=agent, run_dir=str(run_dir), resume=resume)

    run_training(cfg(tmp_path / "full", 4))
    final = run_training(cfg(tmp_path / "cut", 4), hooks=[SignalAt(1, signal.SIGINT)])
    assert final["interrupted"] == "SIGINT" and final["iteration"] == 2
    run_training(cfg(tmp_path / "cut", 4, resume="auto"))
    assert_same(final_state(tmp_path / "cut", 4), final_state(tmp_path / "full", 4))


def test_the_final_line_names_the_newest_checkpoint_and_a_command_a_shell_can_run(tmp_path):
    run = tmp_path / "my run"  # quoted for the shell
    older = run / "checkpoints" / "ckpt_00000004.pt"  # the save of 5 was refused (NaN skips)
    line = interrupts.final_line(signal.SIGTERM, 5, older, run, ["my.tasks"])
    assert line.startswith(f"interrupted by SIGTERM at iteration 5; no checkpoint of iteration 5; "
                           f"the newest is {older}; resume with: ")  # fmt: skip
    command = line.split("resume with: ")[1]
    assert shlex.split(command) == [
        *("distrl", "train", "--import", "my.tasks", "--config", str(run / "config.yaml")),
        *("--resume", "auto", "--run-dir", str(run)),
    ]


def test_a_launcher_reports_a_rank_that_crashed_while_stopping_as_a_failure():
    """The launchers returned 130/143 after a signal even when a rank crashed during the stop."""
    assert interrupts.final_code(0, 0) == 0 and interrupts.final_code(0, 1) == 1
    assert interrupts.final_code(signal.SIGINT, 0) == 130  # the ranks stopped and saved
    assert interrupts.final_code(signal.SIGTERM, 143) == 143
    assert interrupts.final_code(signal.SIGTERM, -signal.SIGTERM) == 143
    assert interrupts.final_code(signal.SIGINT, 1) == 1  # a rank failed while stopping
    # the launcher itself SIGKILLed them (a second Ctrl-C, or --stop-timeout passing)
    assert interrupts.final_code(signal.SIGINT, -signal.SIGKILL, killed=True) == 130
    assert interrupts.final_code(signal.SIGINT, -signal.SIGKILL) == -signal.SIGKILL


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_distrl_train_on_two_ranks_runs_from_a_thread(tmp_path):
    """It failed with 'signal only works in main thread' (the launcher set its handlers)."""
    import threading

    import distrl

    out: dict = {}

    def work() -> None:
        try:
            agent = {"num_steps": 8, "max_iterations": 2}
            run_dir = str(tmp_path / "run")
            out["result"] = distrl.train("cartpole", nproc=2, run_dir=run_dir, agent=agent,
                                         env={"num_envs": 8}, progress=False)  # fmt: skip
        except Exception as e:  # noqa: BLE001 (the test reports it)
            out["error"] = e

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(110)
    assert "error" not in out, out.get("error")
    assert out["result"].metrics["iteration"] == 2
