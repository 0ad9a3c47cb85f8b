"""``distrl train <task> --nproc N --dist.strategy elastic``: start the N rank processes here,
without torchrun, and keep the run going when one of them is lost.

This process hosts the membership store (a TCPStore on a socket bound to 127.0.0.1, as the
torchrun launcher does, ``launch.rendezvous_store``) and starts one process per slot, each
with ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` as torchrun would set them, ``DISTRL_ELASTIC``
naming the store and ``DISTRL_ELASTIC_ID`` its member id (counted in the store: unique in the
run). It watches them every 0.1 s:

- a warm spare runs beside them while ``--max-restarts`` allows (``elastic.stand_by``: its
  imports paid, connected to the store); a lost slot is handed to it, so the replacement joins
  in about an iteration, and a new spare starts;
- a process that exits before the run finished is marked dead in the store
  (``el/dead/<id>``: the survivors need not wait ``--dist.timeout`` for its vote) and, while
  ``--max-restarts`` replacements are left, started again as a replacement
  (``DISTRL_ELASTIC_JOIN``), which joins at the next iteration boundary with a live peer's state;
- a process the survivors left out (``el/out/<id>``: it stalled past ``--dist.timeout``, e.g.
  SIGSTOP) is killed, and so replaced the same way;
- the run is over when every slot's process has exited 0 after the members marked it finished.

**Several machines** (``--nnodes M --node-rank K --master-addr A --master-port P``): the same
command runs on every machine. Node 0's launcher hosts the store on ``A:P`` (bound to that
address only); the others join it as clients. Node K starts the slots K * N .. K * N + N - 1
and looks after them as above. A whole node lost (its processes stop beating) is left out by
the survivors like any rank; the same command started again on that machine finds the run
under way and starts its slots as replacements, which rejoin with a live peer's state. Node 0
holds the store: the run survives the loss of any other node, not of node 0 (as torchrun's
c10d rendezvous host).

Signals are passed on as ``distrl.interrupts.supervise`` does for torchrun: the ranks stop at
an agreed iteration boundary and save; a second signal, or ``--stop-timeout``, kills them.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from distrl import interrupts
from distrl.distributed import launch as torchrun_launch
from distrl.distributed.elastic import ID_ENV, JOIN_ENV, STANDBY_ENV, START_WAIT, STORE_ENV
from distrl.distributed.launch import ONE_NODE, Nodes
from distrl.distributed.store_secret import guard

NODE_BEAT, NODE_STALE = 1.0, 10.0
"""Each launcher writes ``el/node/<k>`` every NODE_BEAT s; node 0 waits for the other nodes'
launchers to finish before it takes the store away, unless one is NODE_STALE s silent."""


def _store(nodes: Nodes) -> tuple[Any, int]:
    """The run's membership store and its port: hosted here on node 0 (one node: a free
    loopback port), joined as a client elsewhere."""
    import datetime

    import torch.distributed as dist

    if nodes.rank == 0:
        try:
            store = torchrun_launch.rendezvous_store(host=nodes.addr, port=nodes.port)
        except OSError as e:
            raise ValueError(
                f"node 0 cannot listen on --master-addr {nodes.addr} --master-port {nodes.port}"
                f" ({e.strerror}); give an address of this machine that the other nodes reach, "
                f"and a free port"
            ) from None
        return guard(store), store.port  # values signed with the run's secret (store_secret)
    try:
        store = dist.TCPStore(
            nodes.addr,
            nodes.port,
            is_master=False,
            timeout=datetime.timedelta(seconds=START_WAIT),
            use_libuv=True,
        )
    except RuntimeError as e:  # (DistNetworkError / DistStoreError)
        raise ValueError(
            f"node {nodes.rank} could not reach node 0's store at {nodes.addr}:{nodes.port} "
            f"within {START_WAIT:g} s ({str(e).splitlines()[0][:160]}); start node 0 with the "
            f"same --master-addr and --master-port"
        ) from None
    return guard(store), nodes.port


def _slot_env(
    base: dict[str, str], slot: int, nproc: int, nodes: Nodes, port: int, uid: int
) -> dict[str, str]:
    env = dict(base)
    env.update(
        RANK=str(slot),
        LOCAL_RANK=str(slot - nodes.rank * nproc),
        WORLD_SIZE=str(nodes.count * nproc),
        LOCAL_WORLD_SIZE=str(nproc),
        GROUP_RANK=str(nodes.rank),
        ROLE_RANK=str(slot),
        ROLE_WORLD_SIZE=str(nodes.count * nproc),
        MASTER_ADDR=nodes.addr,
        MASTER_PORT=str(port),
    )
    env[STORE_ENV] = f"{nodes.addr}:{port}"
    env[ID_ENV] = str(uid)
    env.pop(JOIN_ENV, None)
    return env


RESTARTS_ENV = "DISTRL_MAX_RESTARTS"
"""The launcher's --max-restarts, for the ranks' line at a lost rank (whether one rejoins)."""


def launch(
    nproc: int,
    max_restarts: int,
    script_args: list[str],
    stop_timeout: float = 300.0,
    run_dir: str = "",
    modules: Sequence[str] = (),
    nodes: Nodes = ONE_NODE,
) -> int:
    """Run this node's ``nproc`` slots until the run finishes; returns 0, the first failing
    exit code once no replacement is left and no slot can go on, or 128 + the signal after an
    interrupt."""
    store, port = _store(nodes)
    base = torchrun_launch.launch_env(nproc, one_machine=nodes.count == 1)
    base[RESTARTS_ENV] = str(max_restarts)  # launcher flags reach no rank: this one is said
    # a node started while the run is under way (it was lost, and started again): its slots
    # are replacements, which take a live peer's state
    late = nodes.rank > 0 and store.check(["el/0/members"])
    if late:
        _note(f"node {nodes.rank}: the run is under way; its slots rejoin as replacements")
    cmd = [sys.executable, "-m", "distrl.cli", *script_args]
    fresh_cmd = [
        sys.executable,
        "-m",
        "distrl.cli",
        *torchrun_launch.strip_flags(script_args, ["--resume"]),
    ]  # fmt: skip  (a replacement's state comes from a live peer, never from a checkpoint)
    slots = range(nodes.rank * nproc, (nodes.rank + 1) * nproc)
    procs: dict[int, subprocess.Popen] = {}
    ids: dict[int, int] = {}  # slot -> the member id of its process
    done: set[int] = set()
    restarts_left = max_restarts
    first, deadline, killed = 0, float("inf"), False
    failed = 0
    spare: tuple[subprocess.Popen, int] | None = None
    beat_at = 0.0
    relay = interrupts.Relay()  # a stop reaches a slot still importing once it can take it

    def new_id() -> int:
        return int(store.add("el/ids", 1))

    def start(slot: int, replacement: bool) -> None:
        uid = new_id()
        env = _slot_env(base, slot, nproc, nodes, port, uid)
        env["DISTRL_ELASTIC_STARTED"] = f"{time.time():.3f}"
        if replacement:
            env[JOIN_ENV] = "1"
        args = fresh_cmd if replacement else cmd
        procs[slot], ids[slot] = subprocess.Popen(args, env=env, start_new_session=True), uid

    def start_spare() -> tuple[subprocess.Popen, int] | None:
        """A warm spare (imported, connected) for the next lost slot; none without restarts."""
        if restarts_left <= 0:
            return None
        uid = new_id()
        env = _slot_env(base, slots[0], nproc, nodes, port, uid)
        env[STANDBY_ENV] = "1"
        return subprocess.Popen(fresh_cmd, env=env, start_new_session=True), uid

    def replace(slot: int) -> None:
        """The spare becomes ``slot``'s replacement (a cold start if it is gone), and a new
        spare starts while replacements are left."""
        nonlocal spare
        if spare is not None and spare[0].poll() is None:
            local = slot - nodes.rank * nproc
            store.set(f"el/standby/{spare[1]}", f"{slot} {local} {time.time():.3f}")
            (procs[slot], ids[slot]), spare = spare, None
        else:
            start(slot, replacement=True)
        spare = start_spare()

    def live() -> list[int]:
        return [p.pid for s, p in procs.items() if s not in done and p.poll() is None]

    def on_signal(signum: int, frame: object) -> None:
        nonlocal first, deadline, killed
        sent = signal.SIGTERM if signum == signal.SIGHUP else signum
        if first == 0:
            first, deadline = sent, time.monotonic() + stop_timeout
            interrupts._say(
                f"distrl: {interrupts.name(signum)}: the ranks stop at the next iteration "
                f"boundary and save a final checkpoint (another signal kills them)"
            )
            relay.signum = sent
            relay.pass_on(live())
            return
        killed = True
        interrupts._kill(live(), signal.SIGKILL)
        interrupts._say(
            f"distrl: second {interrupts.name(signum)}: killed the ranks; resume with: "
            f"{interrupts.resume_command(run_dir, modules)}"
        )

    main = threading.current_thread() is threading.main_thread()  # handlers: main thread only
    handled = (*interrupts.SIGNALS, signal.SIGHUP) if main else ()
    previous = {s: signal.getsignal(s) for s in handled}
    for s in handled:
        signal.signal(s, on_signal)
        signal.siginterrupt(s, False)
    try:
        for slot in slots:
            start(slot, replacement=late)
        spare = start_spare()
        while len(done) < nproc:
            time.sleep(0.1)
            if time.monotonic() > deadline:
                killed = True
                interrupts._kill(live(), signal.SIGKILL)
                deadline = float("inf")
            if first and not killed:
                relay.pass_on(live())
            if nodes.count > 1 and time.monotonic() > beat_at:
                store.set(f"el/node/{nodes.rank}", f"{time.time():.3f}")
                beat_at = time.monotonic() + NODE_BEAT
            finished = store.check(["el/finished"])
            for slot, p in list(procs.items()):
                if slot in done:
                    continue
                code = p.poll()
                if code is None:
                    if store.check([f"el/out/{ids[slot]}"]):
                        p.kill()  # left out by the survivors (stalled): a replacement instead
                    continue
                finished = finished or store.check(["el/finished"])  # (set just before it exited)
                if code == 0 and (finished or first):
                    done.add(slot)
                    continue
                store.set(f"el/dead/{ids[slot]}", str(code))
                if finished or first or restarts_left <= 0:
                    done.add(slot)
                    failed = failed or (code if code > 0 else 1)
                    continue
                restarts_left -= 1
                _note(f"slot {slot} (pid {p.pid}) exited with {code}; starting a replacement")
                replace(slot)
            if not live() and len(done) < nproc:
                break  # nobody left to go on with
        result = store.check(["el/finished"])
        if nodes.count > 1:
            _leave(store, nodes)
        if first:  # a stop: its code, unless a slot failed while stopping
            return interrupts.final_code(first, failed, killed)
        if result:
            return 0  # the members finished the run (and its writer saved it), whoever was lost
        return failed or 1
    except RuntimeError as e:  # (DistNetworkError) node 0, and the run's store, went away
        if nodes.rank == 0:
            raise
        _note(
            f"node {nodes.rank}: lost node 0's store at {nodes.addr}:{port} "
            f"({str(e).splitlines()[0][:160]}); the run cannot go on without node 0"
        )
        return 1
    finally:
        for p in [*procs.values(), *([spare[0]] if spare is not None else [])]:
            if p.poll() is None:
                p.kill()
                p.wait()
        for s, handler in previous.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)


def _leave(store: Any, nodes: Nodes) -> None:
    """This node's launcher is done. Node 0 (the store's host) waits for the others' launchers
    to say so too, except for one silent for NODE_STALE s (lost), before it takes the store
    away."""
    store.add("el/nodes-done", 1)
    if nodes.rank != 0:
        return
    while int(store.add("el/nodes-done", 0)) < nodes.count:
        alive = [
            k
            for k in range(1, nodes.count)
            if store.check([f"el/node/{k}"])
            and time.time() - float(store.get(f"el/node/{k}").decode()) < NODE_STALE
        ]
        if not alive:
            return
        time.sleep(0.1)


def _note(text: str) -> None:
    print(f"distrl elastic: {text}", file=sys.stderr, flush=True)
