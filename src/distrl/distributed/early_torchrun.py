"""torchrun's process started before the command imports torch (``distrl train --nproc N``).

``import torch`` takes 3-4 s on a small VM, and the command, torchrun and the ranks each pay
it, one after the other. When the command line asks for ``--nproc N`` the command starts
torchrun's process first (``prestart``, from ``cli.train_main``), so the two import torch at
once; that process (``launch.main``) imports torchrun and waits on a pipe for its arguments and
environment (``wait_for_go``), which ``launch.launch`` sends once the config has been checked
(``EarlyTorchrun.go``), or exits at the pipe's end (a bad config, elastic's launcher, a command
that died: ``discard``). A 2-rank launch of one iteration took 10.96 s before and 7.65 s after
on the 2-core VM, with the quicker exits (docs/benchmarks.md). The standard library only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence


def under_torchrun() -> bool:
    """This process is a rank that torchrun (or elastic's launcher) started."""
    return "TORCHELASTIC_RUN_ID" in os.environ or "LOCAL_RANK" in os.environ


class EarlyTorchrun:
    """torchrun's process, started before the command imports torch: it imports torchrun and
    then waits on a pipe for ``go``'s arguments and environment (``wait_for_go``), or exits at the
    pipe's end. In a session of its own, as ``interrupts.supervise`` starts torchrun."""

    def __init__(self) -> None:
        read, self.write = os.pipe()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        cmd = [sys.executable, "-m", "distrl.distributed.launch", "--warm", str(read)]
        try:
            self.proc = subprocess.Popen(cmd, env=env, pass_fds=(read,), start_new_session=True)
        finally:
            os.close(read)

    def go(self, cmd: list[str], env: dict[str, str]) -> subprocess.Popen:
        """torchrun ``cmd`` (``torchrun_command``'s) with ``env``, in the waiting process (in
        a new one if that one is gone)."""
        assert cmd[1:3] == ["-m", "distrl.distributed.launch"], cmd
        try:
            with os.fdopen(self.write, "w", encoding="utf-8") as pipe:
                pipe.write(json.dumps({"argv": cmd[3:], "env": env}) + "\n")
        except BrokenPipeError:  # it died before reading (killed, or out of memory)
            self.proc.wait()
            return subprocess.Popen(cmd, env=env, start_new_session=True)
        return self.proc

    def discard(self) -> None:
        os.close(self.write)
        self.proc.kill()
        self.proc.wait()


_early: EarlyTorchrun | None = None


def prestart(argv: Sequence[str]) -> None:
    """Start torchrun's process now when ``argv`` (``train``'s words) asks for ``--nproc N``,
    N > 1, on this machine and under torchrun (not elastic's launcher, not a population), so
    that it imports torch while this process does; ``launch`` takes it, ``discard`` ends
    it where the config says otherwise. A guess from the words alone: a config file that sets
    ``nproc`` launches as before, without it."""
    global _early
    if _early is not None or under_torchrun() or os.environ.get("DISTRL_ELASTIC_STANDBY"):
        return
    words = [w for a in argv for w in a.split("=", 1)]
    nproc = words[words.index("--nproc") + 1] if "--nproc" in words[:-1] else "1"
    others = ("--population", "--nnodes", "--help", "-h", "--pbt.help", "elastic")
    if not nproc.isdigit() or int(nproc) < 2 or any(w in words for w in others):
        return
    _early = EarlyTorchrun()


def discard() -> None:
    """End a ``prestart`` process that no launch took (no-op without one)."""
    global _early
    if _early is not None:
        _early.discard()
        _early = None


def take() -> EarlyTorchrun | None:
    global _early
    warm, _early = _early, None
    return warm


def wait_for_go(fd: int) -> bool:
    """In the early process: read the command's message from pipe ``fd`` and take its
    environment and torchrun arguments as this process's own; False at the pipe's end."""
    with os.fdopen(fd, encoding="utf-8") as pipe:
        line = pipe.readline()
    if not line:
        return False
    go = json.loads(line)
    os.environ.clear()
    os.environ.update(go["env"])
    sys.argv = [sys.argv[0], *go["argv"]]
    return True
