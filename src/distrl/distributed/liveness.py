"""Liveness: is every peer still there, and how a rank learns that it was left out.

Every rank writes a heartbeat (the iteration it entered, and when) to the rendezvous store once
per iteration; a failed collective is re-raised as ``PeerFailure`` naming each other rank with
the iteration and time it was last seen (Gloo's own message has only a socket address). A
coordinator that drops a peer (a parameter server, a learner) marks it in the store with why
(``dropped_reason``), wakes it (``release_dropped``: SIGCONT to a stopped rank on this host)
and waits for it to say it left (``mark_left``). Every store operation has a deadline
(``store_op``): with its host stopped, a read from the store blocks past the store's own timeout.
Apart from ``context.py``, which says who a rank is.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from distrl.distributed.context import DistContext


class PeerFailure(RuntimeError):
    """A collective failed: a peer died, stalled past --dist.timeout, or lost its connection."""


class RankDropped(PeerFailure):
    """This rank was dropped by the strategy (a parameter server or a learner went on without
    it, e.g. after it stalled); the run goes on, and this rank should leave quietly."""


class JoinRefused(ValueError):
    """A replacement the members would not take in (it runs another install): it leaves,
    saying why in one line, and the run goes on without it."""


STORE_WAIT = 5.0
"""Seconds a rank waits for the rendezvous store to answer one operation before it stops using
the store for good (``store_op``)."""
_store_down = False


def store_is_back() -> None:
    """A new process group has a new store: use it again (``store_op`` may have given up)."""
    global _store_down
    _store_down = False


def _store():
    """The default process group's rendezvous store, its values signed with the run's secret
    (``store_secret.guard``: a value another process wrote is not read); None if unavailable,
    or given up on."""
    if _store_down:
        return None
    try:
        from torch.distributed.distributed_c10d import _get_default_store

        from distrl.distributed.store_secret import guard

        return guard(_get_default_store())
    except Exception:
        return None


def store_op(op: Callable[[Any], Any], wait: float | None = None) -> tuple[bool, Any]:
    """``(True, op(store))``, or ``(False, None)`` when there is no store or it failed or did not
    answer within ``wait`` seconds (default ``STORE_WAIT``). A read from a store whose host is
    stopped (SIGSTOP: rank 0 hosts it when not under torchrun's agent) blocks past the store's
    own timeout, so the operation runs in a daemon thread that is left behind if it does not
    answer; the client is then mid-request, so after a failure this process never uses the
    store again (heartbeats and the drop and silence reports go without it)."""
    global _store_down
    store = _store()
    if store is None:
        return False, None
    box: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            box.append((True, op(store)))
        except Exception:
            box.append((False, None))

    worker = threading.Thread(target=run, name="distrl-store", daemon=True)
    worker.start()
    _join_while_running(worker, STORE_WAIT if wait is None else wait)
    if not box or not box[0][0]:
        _store_down = True
        return False, None
    return box[0]


def _join_while_running(worker: threading.Thread, wait: float) -> None:
    """``worker.join(wait)``, where time this process spent stopped (SIGSTOP, then SIGCONT)
    does not count: a rank stopped in the middle of a store operation and woken later (a
    dropped rank that ``release_dropped`` wakes) must not take the clock's jump for a store
    that did not answer, give the store up and then fail to read why it was dropped. The wait
    is taken in slices; a slice counts at most ``4 * slice``."""
    step, waited = 0.05, 0.0
    while worker.is_alive() and waited < wait:
        t0 = time.monotonic()
        worker.join(min(step, wait - waited))
        waited += min(time.monotonic() - t0, 4 * step)


def register(rank: int) -> None:
    """Say in the store where this rank runs (host and pid), for ``release_dropped``."""
    store = _store()
    if store is not None:
        store.set(f"distrl/pid/{rank}", f"{socket.gethostname()} {os.getpid()}")


def heartbeat(ctx: DistContext, iteration: int) -> None:
    """Record in the store that this rank entered ``iteration`` now (one small set per
    iteration); ``peer_failure`` reads these to name the rank that went silent."""
    key = f"distrl/dropped/{ctx.rank}"

    def beat(store: Any) -> str | None:
        store.set(f"distrl/alive/{ctx.rank}", f"{iteration} {time.time():.3f}")
        return store.get(key).decode() if store.check([key]) else None

    why = store_op(beat)[1]
    if why is not None:
        raise RankDropped(f"rank {ctx.rank}: dropped from the run: {why}")


def dropped_reason(rank: int, wait: float | None = None) -> str | None:
    """Why ``rank`` was dropped (``release_dropped``), or None: not dropped, or no store
    (``wait``: as ``store_op``)."""
    key = f"distrl/dropped/{rank}"
    reason: str | None = store_op(
        lambda store: store.get(key).decode() if store.check([key]) else None, wait
    )[1]
    return reason


def mark_left(rank: int) -> None:
    """A dropped rank says it is leaving (``release_dropped`` waits for this)."""
    store_op(lambda store: store.set(f"distrl/left/{rank}", "1"))


def release_dropped(dropped: dict[int, str], wait: float) -> list[int]:
    """Let ranks the strategy dropped leave: mark each in the store with why, wake those on
    this host (SIGCONT: a stalled rank may be stopped), and wait up to ``wait`` s for each to
    say it left (it then exits 0). Without this, torchrun's agent waits for a stopped rank
    forever after the others finished. Returns the ranks that did not leave in time (on
    another host and still stopped, say)."""
    if _store() is None or not dropped:
        return []
    waiting = set(dropped)
    for r, why in dropped.items():

        def mark(store: Any, r: int = r, why: str = why) -> tuple[str, int]:
            store.set(f"distrl/dropped/{r}", why)
            host, pid = store.get(f"distrl/pid/{r}").decode().split()
            return host, int(pid)

        ok, where = store_op(mark)
        if ok and where[0] == socket.gethostname():
            if _gone(where[1]):
                waiting.discard(r)  # it died: nothing to wait for
            else:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(where[1], signal.SIGCONT)
    deadline = time.time() + wait
    while waiting and time.time() < deadline:
        ok, left = store_op(functools.partial(left_ranks, ranks=frozenset(waiting)))
        if not ok:
            break  # the store is gone: nobody can say they left
        waiting -= left
        time.sleep(0.1)
    return sorted(waiting)


def silent_ranks(ctx: DistContext) -> str:
    """'rank 1 last seen at iteration 2, 10.4 s ago; ...' for every other rank, from the
    heartbeats; empty when the store cannot be read (its host may be the rank that died)."""
    if _store_down:
        return "the rendezvous store stopped answering earlier; its host may be down"
    if _store() is None:
        return ""
    ok, beats = store_op(lambda store: heartbeats(store, range(ctx.world_size), ctx.rank))
    if not ok:
        return "the rendezvous store did not answer; its host may be down"
    now = time.time()
    seen = sorted(((now - t, r, it) for r, (it, t) in beats.items()), reverse=True)
    return "; ".join(
        f"rank {r} last seen at iteration {it}, {age:.1f} s ago" for age, r, it in seen
    )


def left_ranks(store: Any, ranks: frozenset[int]) -> set[int]:
    """The ``ranks`` that said they left (``mark_left``); a ``store_op`` body."""
    return {r for r in ranks if store.check([f"distrl/left/{r}"])}


def heartbeats(store: Any, ranks: Any, me: int) -> dict[int, tuple[int, float]]:
    """{rank: (last iteration, unix time)} of the ``ranks`` (not ``me``) that sent a heartbeat;
    a ``store_op`` body."""
    seen = {}
    for r in ranks:
        key = f"distrl/alive/{r}"
        if r != me and store.check([key]):
            it, t = store.get(key).decode().split()
            seen[r] = (int(it), float(t))
    return seen


def peer_failure(ctx: DistContext, timeout: float, error: BaseException) -> PeerFailure:
    """Turn a backend error into one that names the rank that went silent, where the store can
    tell (each rank's last heartbeat), with the backend's own message."""
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    who = silent_ranks(ctx)
    return PeerFailure(
        f"rank {ctx.rank}/{ctx.world_size}: a collective failed, so a peer rank died, stalled "
        f"past --dist.timeout={timeout:g}s or lost its connection"
        + (f" ({who})" if who else "")
        + f". Backend: {first}"
    )


def _gone(pid: int) -> bool:
    """The process has exited (or is a zombie waiting for its parent to reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True
