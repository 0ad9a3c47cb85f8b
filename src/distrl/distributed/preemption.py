"""DD-PPO's preemption threshold (``--dist.preempt-fraction F``, allreduce): once a fraction F
of the ranks have collected their whole rollout, every other rank ends its rollout early, so
that one slow rank does not hold every other rank at the next all-reduce.

How the ranks learn it, without a collective and at about no cost per step: each rank adds 1
to a per-iteration counter in the rendezvous store (``store.add``: a counter, which the run's
secret does not sign, ``store_secret``) when its rollout is complete, and a rank still
collecting reads that counter (``store.add(key, 0)``, one round trip: about 23 us on loopback)
at most once every ``POLL_S`` seconds, and only once it has its minimum share. A time gate,
not every k steps: the cost stays under ~1 % of the rollout whatever an env step costs (a 50 us
step or a 50 ms one), and a straggler learns of the count within ``POLL_S`` plus one step.

A rank stops only after ``MIN_SHARE`` of ``--agent.num-steps`` and at a step count whose rows
split into the minibatches evenly (``granularity``). The counter is a hint, never a
collective: a rank that cannot read it simply collects its whole rollout, and every rank does
the same all-reduces whatever it collected.
"""

from __future__ import annotations

import math
import time
from typing import Any

MIN_SHARE = 0.25
"""The share of --agent.num-steps a rank always collects before it may be preempted (DD-PPO
keeps a minimum too): a preempted rank's gradient is the mean of at least this many rows."""
POLL_S = 0.002
"""Seconds between two reads of the counter by a rank still collecting."""


def granularity(num_envs: int, num_minibatches: int) -> int:
    """The smallest step count g such that g x num_envs rows split into the minibatches."""
    return num_minibatches // math.gcd(num_envs, num_minibatches)


class Preemption:
    """One collecting rank's side: ``begin`` each rollout, ``now(t)`` after each step (True:
    stop with t steps), ``finished`` when its rollout was complete."""

    def __init__(self, fraction: float, world_size: int, rank: int, num_steps: int, step: int):
        self.needed = max(1, math.ceil(fraction * world_size - 1e-9))
        """Ranks done that preempt the others: ceil(F x W) (with W of them, nobody is)."""
        self.rank, self.num_steps, self.step = rank, num_steps, step
        self.min_steps = min(num_steps, step * math.ceil(MIN_SHARE * num_steps / step))
        self.store: Any = None
        self.failed = False
        self.key = ""
        self.next_poll = 0.0

    def begin(self, iteration: int) -> None:
        """This iteration's counter; rank 0 drops the previous one (every rank is past that
        rollout: the last iteration ended in collectives of every rank)."""
        from distrl.distributed import liveness, store_secret

        self.store = None if self.failed else liveness._store()
        self.key = f"distrl/preempt/{iteration}"
        self.next_poll = time.perf_counter()
        if self.store is not None and self.rank == 0 and iteration > 0:
            self._op(lambda s: store_secret.raw(s).delete_key(f"distrl/preempt/{iteration - 1}"))

    def now(self, t: int) -> bool:
        """Stop after ``t`` steps: enough ranks are done, polled at most every ``POLL_S``."""
        if t < self.min_steps or t >= self.num_steps or t % self.step or self.store is None:
            return False
        clock = time.perf_counter()
        if clock < self.next_poll:
            return False
        self.next_poll = clock + POLL_S
        done = self._op(lambda s: s.add(self.key, 0))
        return done is not None and int(done) >= self.needed

    def finished(self) -> None:
        """This rank's rollout is complete: count it."""
        if self.store is not None:
            self._op(lambda s: s.add(self.key, 1))

    def _op(self, op: Any) -> Any:
        """``op(store)``, on this thread (no ``liveness.store_op`` thread: 190 us against 23);
        a store that fails is given up for the run (no preemption then)."""
        try:
            return op(self.store)
        except Exception:
            self.store, self.failed = None, True
            return None
