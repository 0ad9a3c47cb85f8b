"""OpenMP settings of distrl's processes, set before torch loads its OpenMP runtime.

GNU OpenMP (the runtime the torch wheels ship) reads ``OMP_WAIT_POLICY`` once, when it loads,
and by default a thread that finishes its share of a parallel region spins for a while (about
3 ms) waiting for the next. Two processes doing that on the same cores take each other's time
slices: ``distrl train halfcheetah`` took 170x longer per update beside a second distrl run
(docs/training.md, "Threads"). distrl's own processes (the ``distrl``, ``train`` and ``play``
commands, and every rank its launchers start) therefore let idle OpenMP threads sleep, unless
the user set the variable. A leaf module: the standard library only.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

DEFAULTS = {"OMP_WAIT_POLICY": "PASSIVE"}
"""What a distrl process starts with where the user set nothing (``benchmarks/neighbour.py``
measures it alone and beside a second run)."""


def set_defaults(env: MutableMapping[str, str] | None = None) -> None:
    """``DEFAULTS`` into ``env`` (this process's environment by default) where unset. It takes
    effect in a process that has not imported torch yet, and in the processes it starts."""
    target = os.environ if env is None else env
    for key, value in DEFAULTS.items():
        target.setdefault(key, value)
