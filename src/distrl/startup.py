"""Where a run's start-up goes: wall-clock marks from the interpreter's start to the end of the
first iteration, reported once, as ``startup/<phase>`` seconds in the first record of a run
(``metrics.jsonl``, TensorBoard), and read by ``distrl bench startup``.

The phases, each the time since the mark before it:

  python        the interpreter's own start-up and site imports, until distrl's command line
                runs its first line (from the process's start time in ``/proc``; Linux only)
  cli           the command line's own modules (tyro, yaml, the config's dataclasses)
  torch         ``import torch``
  config        the task's config parsed and checked (the task registry and the modules the
                checks need)
  ranks         the trainer's modules, the process group and the strategy (nothing to join
                for one process)
  env           the task's envs built
  telemetry     the run directory's sinks: metrics.jsonl, TensorBoard, the console
  runner        the policy, the optimizer and the runner, a resume's checkpoint loaded
  iteration     the first iteration (its one-time costs show against a later one's
                ``time/iteration``)

A mark is a ``time.time()`` stamp; nothing here imports anything but the standard library, so
the first mark costs nothing.
"""

from __future__ import annotations

import os
import time

_marks: dict[str, float] = {}
_reported = False

PHASES = ("python", "cli", "torch", "config", "ranks", "env", "telemetry", "runner", "iteration")


def process_start_time() -> float | None:
    """The Unix time this process started, to the kernel's clock tick (``/proc/self/stat``'s
    start time, counted from boot as ``CLOCK_BOOTTIME`` is), or None where there is no
    ``/proc``."""
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read().decode()
        ticks = int(stat[stat.rindex(")") + 2 :].split()[19])  # field 22: starttime
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
        return time.time() - age
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def mark(phase: str) -> None:
    """The end of ``phase`` (one of ``PHASES``), now; a phase already marked keeps its first."""
    _marks.setdefault(phase, time.time())


def take() -> dict[str, float]:
    """``startup/<phase>`` seconds of the phases marked so far, once per process (then {}): the
    first record of a run holds them, a later one (or a resumed session's second) does not."""
    global _reported
    if _reported or "iteration" not in _marks:
        return {}
    _reported = True
    out: dict[str, float] = {}
    # From the process's start only when distrl's command line ran (an API call's process
    # did other things before): its phases then start at the first one marked.
    previous = process_start_time() if "python" in _marks else None
    start = previous
    for phase in PHASES:
        at = _marks.get(phase)
        if at is None:
            continue
        if previous is not None:
            out[f"startup/{phase}"] = max(0.0, at - previous)
        previous = at
    if start is not None:
        out["startup/total"] = max(0.0, _marks["iteration"] - start)
    return out
