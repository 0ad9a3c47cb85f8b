"""``distrl train <task> --nproc N --dist.strategy elastic``: start the N rank processes here,
without torchrun, and keep the run going when one of them is lost.

This process hosts the membership store (a TCPStore on a socket bound to 127.0.0.1, as the
torchrun launcher does, ``launch.rendezvous_store``) and starts one process per slot, each
with ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` as torchrun would set them and ``DISTRL_ELASTIC``
naming the store. It watches them every 0.1 s:

- a warm spare runs beside them while ``--max-restarts`` allows (``elastic.stand_by``: its
  imports paid, connected to the store); a lost slot is handed to it, so the replacement joins
  in about an iteration, and a new spare starts;
- a process that exits before the run finished is marked dead in the store
  (``el/dead/<pid>``: the survivors need not wait ``--dist.timeout`` for its vote) and, while
  ``--max-restarts`` replacements are left, started again as a replacement
  (``DISTRL_ELASTIC_JOIN``), which joins at the next iteration boundary with a live peer's state;
- a process the survivors left out (``el/out/<pid>``: it stalled past ``--dist.timeout``, e.g.
  SIGSTOP) is killed, and so replaced the same way;
- the run is over when every slot's process has exited 0 after the members marked it finished.

Signals are passed on as ``distrl.interrupts.supervise`` does for torchrun: the ranks stop at
an agreed iteration boundary and save; a second signal, or ``--stop-timeout``, kills them.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Sequence

from distrl import interrupts
from distrl.distributed import launch as torchrun_launch
from distrl.distributed.elastic import JOIN_ENV, STANDBY_ENV, STORE_ENV


def _slot_env(base: dict[str, str], slot: int, nproc: int, port: int) -> dict[str, str]:
    env = dict(base)
    env.update(
        RANK=str(slot),
        LOCAL_RANK=str(slot),
        WORLD_SIZE=str(nproc),
        LOCAL_WORLD_SIZE=str(nproc),
        GROUP_RANK="0",
        ROLE_RANK=str(slot),
        ROLE_WORLD_SIZE=str(nproc),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    env[STORE_ENV] = f"127.0.0.1:{port}"
    env.pop(JOIN_ENV, None)
    return env


def launch(
    nproc: int,
    max_restarts: int,
    script_args: list[str],
    stop_timeout: float = 300.0,
    run_dir: str = "",
    modules: Sequence[str] = (),
) -> int:
    """Run the ``nproc`` slots until the run finishes; returns 0, the first failing exit code
    once no replacement is left and no slot can go on, or 128 + the signal after an
    interrupt."""
    store = torchrun_launch.rendezvous_store()
    base = torchrun_launch.launch_env(nproc)
    cmd = [sys.executable, "-m", "distrl.cli", *script_args]
    procs: dict[int, subprocess.Popen] = {}
    done: set[int] = set()
    restarts_left = max_restarts
    first, deadline = 0, float("inf")
    failed = 0
    spare: subprocess.Popen | None = None

    def start(slot: int, replacement: bool) -> None:
        env = _slot_env(base, slot, nproc, store.port)
        args = cmd
        env["DISTRL_ELASTIC_STARTED"] = f"{time.time():.3f}"
        if replacement:  # its state comes from a live peer, never from a checkpoint
            env[JOIN_ENV] = "1"
            fresh = torchrun_launch.strip_flags(script_args, ["--resume"])
            args = [sys.executable, "-m", "distrl.cli", *fresh]
        procs[slot] = subprocess.Popen(args, env=env, start_new_session=True)

    def start_spare() -> subprocess.Popen | None:
        """A warm spare (imported, connected) for the next lost slot; none without restarts."""
        if restarts_left <= 0:
            return None
        env = _slot_env(base, 0, nproc, store.port)
        env[STANDBY_ENV] = "1"
        fresh = torchrun_launch.strip_flags(script_args, ["--resume"])
        return subprocess.Popen(
            [sys.executable, "-m", "distrl.cli", *fresh], env=env, start_new_session=True
        )

    def replace(slot: int) -> None:
        """The spare becomes ``slot``'s replacement (a cold start if it is gone), and a new
        spare starts while replacements are left."""
        nonlocal spare
        if spare is not None and spare.poll() is None:
            store.set(f"el/standby/{spare.pid}", f"{slot} {time.time():.3f}")
            procs[slot], spare = spare, None
        else:
            start(slot, replacement=True)
        spare = start_spare()

    def live() -> list[int]:
        return [p.pid for s, p in procs.items() if s not in done and p.poll() is None]

    def on_signal(signum: int, frame: object) -> None:
        nonlocal first, deadline
        sent = signal.SIGTERM if signum == signal.SIGHUP else signum
        if first == 0:
            first, deadline = sent, time.monotonic() + stop_timeout
            interrupts._say(
                f"distrl: {interrupts.name(signum)}: the ranks stop at the next iteration "
                f"boundary and save a final checkpoint (another signal kills them)"
            )
            interrupts._kill(live(), sent)
            return
        interrupts._kill(live(), signal.SIGKILL)
        interrupts._say(
            f"distrl: second {interrupts.name(signum)}: killed the ranks; resume with: "
            f"{interrupts.resume_command(run_dir, modules)}"
        )

    handled = (*interrupts.SIGNALS, signal.SIGHUP)
    previous = {s: signal.getsignal(s) for s in handled}
    for s in handled:
        signal.signal(s, on_signal)
        signal.siginterrupt(s, False)
    try:
        for slot in range(nproc):
            start(slot, replacement=False)
        spare = start_spare()
        while len(done) < nproc:
            time.sleep(0.1)
            if time.monotonic() > deadline:
                interrupts._kill(live(), signal.SIGKILL)
                deadline = float("inf")
            finished = store.check(["el/finished"])
            for slot, p in list(procs.items()):
                if slot in done:
                    continue
                code = p.poll()
                if code is None:
                    if store.check([f"el/out/{p.pid}"]):
                        p.kill()  # left out by the survivors (stalled): a replacement instead
                    continue
                finished = finished or store.check(["el/finished"])  # (set just before it exited)
                if code == 0 and (finished or first):
                    done.add(slot)
                    continue
                store.set(f"el/dead/{p.pid}", str(code))
                if finished or first or restarts_left <= 0:
                    done.add(slot)
                    failed = failed or (code if code > 0 else 1)
                    continue
                restarts_left -= 1
                _note(f"slot {slot} (pid {p.pid}) exited with {code}; starting a replacement")
                replace(slot)
            if not live() and len(done) < nproc:
                break  # nobody left to go on with
        if first:
            return interrupts.exit_code(interrupts.name(first))
        if store.check(["el/finished"]):
            return 0  # the members finished the run (and its writer saved it), whoever was lost
        return failed or 1
    finally:
        for p in [*procs.values(), *([spare] if spare is not None else [])]:
            if p.poll() is None:
                p.kill()
                p.wait()
        for s, handler in previous.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)


def _note(text: str) -> None:
    print(f"distrl elastic: {text}", file=sys.stderr, flush=True)
