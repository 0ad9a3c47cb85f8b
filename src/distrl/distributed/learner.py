"""A learner of learner-actor (ranks 0..L-1): the coordinator of its actors on the peer layer
(``distributed/peers.py``). It takes one rollout from each live actor, trains with one gradient
all-reduce per minibatch among the learners (as ``allreduce``), and pushes the new weights to
every actor through the routing table; checkpoints gather the actors' states. The scheme is
``learner_actor.py``'s."""

from __future__ import annotations

import contextlib
import time
from collections import deque
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from distrl import interrupts
from distrl.distributed.allreduce import AllReduceStrategy, verify_identical
from distrl.distributed.base import LEARN_FROM_ACTORS, Role
from distrl.distributed.learner_actor import (
    ABORT,
    BYE,
    DONE,
    ROLLOUT,
    STATE,
    WEIGHTS,
    LARank,
    stalest,
)
from distrl.distributed.liveness import PeerFailure
from distrl.distributed.messages import ActorHeader, LearnerHeader
from distrl.distributed.peers import Coordinator, PeerLost, first_line
from distrl.distributed.transport import from_bytes_payload, pack64
from distrl.storage.rollout_codec import merge_windows


class Learner(LARank):
    """``--dist.strategy learner-actor`` on ranks < L: the ``LearnerLink`` of
    ``runner.roles.learn_from_actors``."""

    def __init__(self, ctx: Any, cfg: Any):
        super().__init__(ctx, cfg)
        self.mine = [a for a in self.actors if (a - self.L) % self.L == ctx.rank]
        self.role = Role(LEARN_FROM_ACTORS, remote_rollouts=len(self.mine))
        self.group, self.group_size = self.learner_group, self.L
        self.targets = set(self.actors)  # the actors it still sends weights to
        self.heard = 0  # what its actors' headers noted (a signal or a stop request)
        self._acc = self._fresh()

    def start(self) -> None:
        self.peers = Coordinator(
            title=f"learner rank {self.rank}",
            noun="actor",
            peers=self.mine,
            header=ActorHeader,
            kinds=(ROLLOUT, STATE, DONE),
            done_kind=DONE,
            capacity=self.capacity,
            group_of=self.pair,
            timeout=self.timeout,
            version=lambda: self.version,
            check=self._check,
            on_drop=self._on_drop,
        )
        self.pending: dict[int, deque] = {a: deque() for a in self.mine}
        self.states: dict[tuple[int, int], Any] = {}

    def _check(self, head: ActorHeader, payload: torch.Tensor) -> str | None:
        if head.kind != ROLLOUT:
            return None
        if payload.numel() != self.codec.numel:
            return f"a rollout of {payload.numel()} words, not {self.codec.numel}"
        return self.codec.problem(payload)

    def _on_drop(self, actor: int, why: str) -> None:
        self.targets.discard(actor)
        if self.peers.live <= {actor}:  # the last one: the learners stop, the actors are told
            self._abort()

    # ---- the learners' collectives -----------------------------------------------------------
    # one all-reduce per minibatch among the learners (group = their new_group), as allreduce
    step = AllReduceStrategy.step

    def _timed(self, fn, *args, sync: bool = True, **kwargs):
        try:
            return super()._timed(fn, *args, sync=sync, **kwargs)
        except PeerFailure:
            if fn is not dist.gather_object:
                self._abort()
            raise

    def interrupt_note(self) -> int:
        """Its actors' interrupt (or stop request) joins its own in the learners' exchange."""
        return interrupts.merge(interrupts.note(), self.heard)

    def verify_replicas(self, module: nn.Module) -> None:
        """The learners hold identical parameters (actors may hold older versions in async)."""
        verify_identical(self, module)

    # ---- weights out -------------------------------------------------------------------------
    def _sync_vector(self) -> torch.Tensor:
        flat = self.ppo.flat_param.detach().reshape(-1).cpu()
        if not self.buffer_words:
            return flat
        bufs = torch.cat([b.detach().reshape(-1).double().cpu() for b in self.policy.buffers()])
        return torch.cat([flat, pack64(bufs)])

    def push_weights(self, stop: bool = False) -> None:
        """The new version's chunks to every actor, as the routing table says; ``stop``: the
        learners' algorithm stopped early at this version, or they agreed on an interrupt or a
        stop request this iteration (every learner decides alike from agreed numbers)."""
        t0 = time.perf_counter()
        self.version += 1
        vec = self._sync_vector()
        sent = 0
        routes = self.table.sends(self.rank)
        halt = int(self.stop_requested or stop)
        head = LearnerHeader(WEIGHTS, version=self.version, failed=-1, stop=halt).words()
        for actor in sorted(self.targets):
            try:
                self.peers.send_raw(actor, head)
                for r in (r for r in routes if r.actor == actor):
                    c = r.chunk
                    self.peers.send_raw(actor, vec[c.start : c.start + c.numel], 1 + c.index)
                    sent += c.numel * 4
            except PeerLost as e:
                self.targets.discard(actor)
                self.peers.drop(actor, f"sending weights to it failed: {first_line(e)}")
        self.peers.heard_now()  # an actor's silence counts from the weights it was just sent
        self._acc["sync_time"] += time.perf_counter() - t0
        self._acc["sync_bytes"] += sent

    # ---- rollouts in -------------------------------------------------------------------------
    def _pump(self, timeout: float, expecting: set[int] | None = None) -> None:
        """Take one message from an actor, or notice silence. Only an actor this learner waits
        on can be silent: one whose rollout is in hand waits for the next weights, quiet by
        design."""
        live = self.peers.live
        suspects = live - self.peers.done if expecting is None else expecting & live
        msg = self.peers.receive(min(timeout, 1.0), suspects)
        if msg is None:
            return
        head, actor = msg.header, msg.peer
        if head.signal:  # the actor was interrupted or asked to stop: stop the run
            self.heard = interrupts.merge(self.heard, head.signal)
        if head.kind == ROLLOUT:
            self.pending[actor].append((head.version, head.seconds, msg.payload))
            self.peers.completed[actor] = head.iteration + 1
        elif head.kind == STATE:
            self.states[(actor, head.iteration)] = from_bytes_payload(msg.payload)

    def receive_rollouts(self, rollouts: Any) -> None:
        """One rollout from every live actor into ``rollouts`` (a RemoteRollouts), dropping
        (and counting) rollouts more than K versions old."""
        windows, times, rets = [], [], []
        got: dict[int, tuple[int, float, torch.Tensor]] = {}
        live = self.peers.live
        while True:
            for a in sorted(live):
                while a not in got and self.pending[a]:
                    version, seconds, payload = self.pending[a].popleft()
                    if self.version - version > self.lag_bound:
                        self._acc["dropped"] += self.codec.T * self.codec.N
                        continue
                    got[a] = (version, seconds, payload)
            if set(got) >= live:
                break
            self._pump(self.timeout, expecting=live - set(got))
        rollouts.resize(len(live))
        for slot, a in enumerate(sorted(live)):
            version, seconds, payload = got[a]
            window, ret = self.codec.decode_into(payload, rollouts, slot)
            windows.append(window)
            rets.append(ret)
            times.append(seconds)
            self._acc["lags"].append(self.version - version)
        rollouts.window = merge_windows(windows)
        rollouts.ret = torch.stack(rets).sum(0)  # flat moments add up (Moments.to_flat)
        rollouts.last_rollout_time = max(times)

    def learner_states(self, iteration: int, own: Any) -> list[Any] | None:
        """Its live actors' states for ``iteration`` (waited for) and its own, gathered on rank
        0 as a list indexed by rank (a dead actor's entry is empty)."""
        live = self.peers.live
        while missing := {a for a in live if (a, iteration) not in self.states}:
            self._pump(self.timeout, expecting=missing)
        mine = {self.rank: own} | {a: self.states.pop((a, iteration)) for a in sorted(live)}
        out: list[dict[int, Any]] | None = [{} for _ in range(self.L)] if self.is_main else None
        self._timed(dist.gather_object, mine, out, dst=0, group=self.learner_group, sync=False)
        if out is None:
            return None
        ranks: list[Any] = [{} for _ in range(self.world_size)]
        for d in out:
            for r, s in d.items():
                ranks[r] = s
        return ranks

    # ---- metrics -----------------------------------------------------------------------------
    def _fresh(self) -> dict[str, Any]:
        return {"lags": [], "dropped": 0, "sync_time": 0.0, "sync_bytes": 0}

    def take_metrics(self) -> dict[str, Any]:
        """This iteration's lag, drops and weight-sync figures (then reset)."""
        acc, lags = self._acc, self._acc["lags"]
        out: dict[str, Any] = {
            "dist/policy_lag_mean": sum(lags) / len(lags) if lags else 0.0,
            "dist/policy_lag_max": max(lags) if lags else 0,
            "dist/dropped_samples": acc["dropped"],
            "dist/actors": len(self.peers.live),
            "dist/version": self.version,
            "time/weight_sync": acc["sync_time"],
            "dist/sync_gbps": acc["sync_bytes"] / acc["sync_time"] / 1e9
            if acc["sync_time"] > 0
            else None,
            "dist/rollout_wait": self.peers.wait,
        }
        if self.peers.messages:
            out["messages"] = self.peers.take_messages()
        self.peers.wait = 0.0
        self._acc = self._fresh()
        return out

    # ---- the end -----------------------------------------------------------------------------
    def finish(self) -> None:
        """BYE to every actor, then wait for its own actors' DONE."""
        for a in sorted(self.targets):
            try:
                self.peers.send_raw(a, LearnerHeader(BYE, version=self.version, failed=-1).words())
            except PeerLost as e:
                self.targets.discard(a)
                self.peers.drop(a, f"sending BYE failed: {first_line(e)}")
        deadline = time.perf_counter() + self.timeout
        while self.peers.live - self.peers.done and time.perf_counter() < deadline:
            self._pump(deadline - time.perf_counter())

    def release(self) -> list[str]:
        """After ``finish``: its dropped actors leave (exit 0) instead of holding torchrun's
        agent; a line for each that did not."""
        return self.peers.release()

    def _abort(self) -> None:
        """Tell every actor which learner failed (best effort) before stopping."""
        who = stalest(self.learners, self.rank)
        for a in sorted(self.targets):
            with contextlib.suppress(Exception):  # it may be gone too
                head = LearnerHeader(ABORT, version=self.version, failed=who).words()
                self.peers.send_raw(a, head)
        self.targets.clear()
