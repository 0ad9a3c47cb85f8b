"""The subprocesses of ``--env.vectorization async`` (Gymnasium's ``AsyncVectorEnv``, and the
Meta-World pool's workers, ``envs/episodic_pool.py``) ignore SIGINT and SIGHUP: their training
process stops them (``close``) after its final checkpoint.

A terminal's Ctrl-C (and its hangup) reaches every process of its foreground group, the env
subprocesses too. Under the forkserver and spawn start methods a subprocess died of
``KeyboardInterrupt`` and the run crashed without a checkpoint; under fork it ran the training
process's handler, which printed the stop line once per subprocess. ``worker`` ignores both
signals before it runs Gymnasium's loop; ``starting`` blocks them in the starting thread while
the subprocesses start (the mask is inherited through fork and exec), so one that comes before
``worker`` runs stays pending, and is then dropped, in the subprocess, and is taken as usual by
the training process once the block ends.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from typing import Any

from gymnasium.vector.async_vector_env import _async_worker

IGNORED = (signal.SIGINT, signal.SIGHUP)


def ignore_signals() -> None:
    """Ignore ``IGNORED`` in this env subprocess (and unblock them: ``starting`` blocked them)."""
    for s in IGNORED:
        signal.signal(s, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, IGNORED)


def worker(*args: Any) -> None:
    """Gymnasium's ``AsyncVectorEnv`` loop (its arguments as they come), the signals ignored."""
    ignore_signals()
    _async_worker(*args)


@contextlib.contextmanager
def starting() -> Iterator[None]:
    """Block ``IGNORED`` in this thread while env subprocesses start."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, IGNORED)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
