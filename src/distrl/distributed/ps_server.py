"""A parameter server's serving rank (rank 0): the coordinator of its workers on the peer layer
(``distributed/peers.py``). It holds the authoritative parameters and optimizer, closes rounds
of gradients (BSP, BAP) or applies each as it comes (ASP), decides and steps, answers the
statistics messages, and yields an event per iteration every live worker completed and per
checkpoint whose states have all arrived (``runner.roles.serve`` records and saves them). The
scheme is ``param_server.py``'s. Its peers are workers, or sink nodes that speak for their
workers (``ps_sink.py``): a sink's gradient is its workers' mean over their summed samples, its
statistics message their rows stacked under their ranks, its state message their states by
rank."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from distrl import interrupts
from distrl.algorithms.ppo import Decision, decide_and_step, decision_metrics
from distrl.distributed.base import SERVE, Role, ServerEvent, StatsLayout, StatsSink
from distrl.distributed.liveness import PeerFailure
from distrl.distributed.messages import ServerHeader, WorkerHeader
from distrl.distributed.param_server import (
    ACTIONS,
    BYE,
    DONE,
    GRAD,
    NO_STATS,
    PARAMS,
    STATE,
    STATS,
    STATS_REPLY,
    PSRank,
    mean_gradient,
    worker_message_error,
)
from distrl.distributed.peers import Coordinator, PeerLost
from distrl.distributed.ps_sink import states_by_rank, unstack_rows
from distrl.distributed.transport import from_bytes_payload, pack64, unpack64


@dataclass
class _Round:
    opened: float
    grads: dict[int, tuple[torch.Tensor, int, int]] = field(default_factory=dict)


class PSServer(PSRank):
    """``--dist.strategy ps-*`` on rank 0: ``serve`` is the server's loop, ``release`` its
    end."""

    role = Role(SERVE)
    layout: StatsLayout | None = None
    """What every worker's statistics row holds (``serve``); a row of another size drops its
    sender instead of failing the sum of a BSP round."""

    def start(self) -> None:
        self.lr = float(self.learner.optimizer.param_groups[0]["lr"])  # what the server logs
        self.sinks = {s: self.tree.members(s) for s in self.tree.sinks}
        self.peers = Coordinator(
            title="parameter server",
            noun="peer" if self.sinks else "worker",
            peers=self.tree.server_peers,
            header=WorkerHeader,
            kinds=(STATS, GRAD, STATE, DONE),
            done_kind=DONE,
            capacity=self.capacity,
            group_of=self.pair,
            timeout=self.timeout,
            version=lambda: self.version,
            check=self._check,
            on_drop=self._on_drop,
        )

    def step(self, learner: Any, flat: torch.Tensor) -> Decision:
        raise TypeError("the parameter server steps in serve(), on its workers' gradients")

    def _check(self, head: WorkerHeader, payload: torch.Tensor) -> str | None:
        if head.kind == STATS and head.sender in self.sinks:
            return self._rows(head.sender, head.nsums, payload)[1]
        return worker_message_error(head.kind, head.nsums, payload, self.num_grad, self.layout)

    def _rows(
        self, peer: int, nsums: int, payload: torch.Tensor
    ) -> tuple[dict[int, torch.Tensor], str | None]:
        """A statistics message's rows by worker rank, or ({}, why not) (``unstack_rows``)."""
        if peer not in self.sinks:
            return {peer: unpack64(payload)}, None
        if payload.numel() % 2:  # not float64 words
            return {}, f"stacked statistics of {payload.numel()} words, an odd number"
        return unstack_rows(unpack64(payload), nsums, self.layout, self.sinks[peer])

    def live_workers(self) -> set[int]:
        """Every worker that still counts: the server's own live workers, and each live
        sink's (those whose rows it sent last)."""
        out: set[int] = set()
        for p in self.peers.live:
            out |= set(self.sinks[p]) if p in self.sinks else {p}
        return out

    def _on_drop(self, peer: int, why: str) -> None:
        if self.mode == "bsp":
            who = f"sink node rank {peer}" if peer in self.sinks else f"worker rank {peer}"
            raise PeerFailure(
                f"rank 0/{self.world_size} (parameter server, ps-bsp): {who} "
                f"lost at iteration {self.peers.completed.get(peer, 0)}: {why}. BSP needs "
                f"every worker; ps-asp and ps-bap go on without it"
            )

    def _down(self, worker: int, kind: int, payload: torch.Tensor, d: Decision | None) -> None:
        d = d or Decision("step", NO_STATS)
        kl, pg, vl, ent, cf = d.stats or NO_STATS

        def header(part: int, parts: int, length: int) -> ServerHeader:
            return ServerHeader(
                kind,
                version=self.version,
                action=ACTIONS.index(d.action),
                approx_kl=kl,
                pg_loss=pg,
                v_loss=vl,
                entropy=ent,
                clipfrac=cf,
                part=part,
                parts=parts,
                length=length,
            )

        self.peers.send(worker, header, payload)

    def _send_each(
        self, workers: list[int], kind: int, payload: torch.Tensor, d: Decision | None
    ) -> None:
        """The same message to each of ``workers``; one that cannot be reached is dropped
        after the others have theirs."""
        lost: list[PeerLost] = []
        for w in workers:
            try:
                self._down(w, kind, payload, d)
            except PeerLost as e:
                lost.append(e)
        for failure in lost:
            self.peers.drop(failure.peer, f"sending to it failed ({failure})")

    # ---- the loop ----------------------------------------------------------------------------
    def serve(
        self,
        on_stats: StatsSink,
        start_iteration: int = 0,
        should_stop: Callable[[], bool] = lambda: False,
        layout: StatsLayout | None = None,
    ) -> Iterator[ServerEvent]:
        """Apply what the workers send until every live one is done; yields an event per
        completed iteration and per checkpoint.

        ``on_stats(summed sums, {worker: its whole statistics row}, live workers)`` lets the
        algorithm take in the statistics (``Runner.absorb``: normalizers, episode windows,
        counts; a dropped worker's windows no longer count)."""
        self.on_stats, self.should_stop, self.layout = on_stats, should_stop, layout
        peers = self.peers
        peers.completed = dict.fromkeys(peers.peers, start_iteration)
        peers.heard_now()
        self.rounds: dict[int, _Round] = {}
        self.next_round = dict.fromkeys(peers.peers, 0)  # per peer: its next round
        self.closed = 0  # rounds < closed are finished (BSP/BAP)
        # per peer: its statistics rows of this round by worker rank, and their sums' length
        self.stats_round: dict[int, tuple[dict[int, torch.Tensor], int]] = {}
        self.pending: dict[int, torch.Tensor] = {}  # async: sums not yet sent to each peer
        self.states: dict[int, dict[int, dict[int, Any]]] = {}  # iteration -> peer -> by rank
        self.latest: dict[int, dict[int, Any]] = {}  # each peer's newest states, by rank
        self.iteration = start_iteration
        self.acc = self._fresh()
        while peers.live - peers.done:
            msg = peers.receive(self._deadline() - time.perf_counter())
            if msg is not None:
                yield from self._handle(msg.peer, msg.header, msg.payload)
            else:
                self._close_expired()
            self._unblock()
            yield from self._catch_up()  # a dropped worker no longer holds iterations back
        for w in sorted(peers.live):
            with contextlib.suppress(PeerLost):  # it finished and left: nothing to tell it
                self._down(w, BYE, torch.zeros(1), None)

    def release(self) -> list[str]:
        """After the loop: its last messages, then the dropped workers are told to leave."""
        return self.peers.release()

    def _deadline(self) -> float:
        d = time.perf_counter() + min(self.timeout, 1.0)
        if self.mode == "bap" and self.rounds:
            oldest = min(r.opened for k, r in self.rounds.items() if k >= self.closed)
            d = min(d, oldest + self.cfg.dist.ps.lifetime)
        return d

    def _close_expired(self) -> None:
        """BAP: close the rounds open longer than ``--dist.ps.lifetime``."""
        if self.mode != "bap":
            return
        now = time.perf_counter()
        for k in sorted(self.rounds):
            if k >= self.closed and now - self.rounds[k].opened > self.cfg.dist.ps.lifetime:
                self._close_round(k)

    def _unblock(self) -> None:
        """Rounds and statistics no longer wait for a worker that was dropped or is done."""
        waiting = self.peers.live - self.peers.done
        for k in sorted(self.rounds):
            if k >= self.closed and set(self.rounds[k].grads) >= waiting:
                self._close_round(k)
        self._maybe_reply_stats()

    def _handle(self, worker: int, head: WorkerHeader, payload: torch.Tensor) -> Iterator[Any]:
        if head.signal:  # the worker was interrupted or asked to stop: stop the run
            self.interrupt = interrupts.merge(self.interrupt, head.signal)
        if head.kind == GRAD:
            self._on_grad(worker, payload, version=head.version, samples=head.samples)
        elif head.kind == STATS:
            self.peers.completed[worker] = head.iteration
            yield from self._catch_up()
            self._on_stats(worker, payload, nsums=head.nsums)
        elif head.kind == STATE:
            state = from_bytes_payload(payload)
            by_rank = self._states_of(worker, state)
            if by_rank is None:
                self.peers.drop(worker, "it sent a state message that is not its workers' states")
                return
            self.latest[worker] = by_rank
            self.states.setdefault(head.iteration, {})[worker] = by_rank
            yield from self._maybe_checkpoint()
        elif head.kind == DONE:
            self.peers.completed[worker] = head.iteration
            yield from self._catch_up()

    def _catch_up(self) -> Iterator[ServerEvent]:
        """An event per iteration that every live worker completed, then due checkpoints."""
        live = self.peers.live
        if not live:
            return
        current = min(self.peers.completed[w] for w in live)
        while self.iteration < current:
            self.iteration += 1
            yield ServerEvent("iteration", self.iteration, self._metrics())
        yield from self._maybe_checkpoint()

    def _maybe_checkpoint(self) -> Iterator[ServerEvent]:
        """A checkpoint of iteration ``it`` once every live worker's state of it arrived; a
        worker that finished earlier (an early stop seen only by it, under ps-asp/bap) stands
        in with its final state."""
        live, done = self.peers.live, self.peers.done
        for it in sorted(self.states):
            have = self.states[it]
            stand_in = {w: self.latest[w] for w in live & done if w not in have}
            if set(have) | set(stand_in) >= live:
                states: dict[int, Any] = {}
                for by_rank in (stand_in | self.states.pop(it)).values():
                    states |= by_rank
                yield ServerEvent("checkpoint", it, states=states)

    def _states_of(self, peer: int, state: Any) -> dict[int, Any] | None:
        """A state message's states by rank (a sink's: ``ps_sink.states_by_rank``)."""
        return states_by_rank(state, self.sinks[peer]) if peer in self.sinks else {peer: state}

    # ---- statistics --------------------------------------------------------------------------
    @staticmethod
    def _sum_rows(rows: dict[int, torch.Tensor], nsums: int) -> torch.Tensor:
        """The rows' sums, added in rank order (as an all-gather's are)."""
        ranks = sorted(rows)
        total = rows[ranks[0]][:nsums].clone()
        for r in ranks[1:]:
            total += rows[r][:nsums]
        return total

    def _on_stats(self, peer: int, payload: torch.Tensor, nsums: int) -> None:
        rows, _ = self._rows(peer, nsums, payload)  # (checked when it arrived)
        if peer in self.sinks:
            self.sinks[peer] = sorted(rows)  # the workers it still speaks for
        if self.mode == "bsp":
            self.stats_round[peer] = (rows, nsums)
            self._maybe_reply_stats()
            return
        sums, live = self._sum_rows(rows, nsums), self.peers.live
        self.on_stats(sums, rows, self.live_workers())
        for w in live:
            self.pending[w] = self.pending[w] + sums if w in self.pending else sums.clone()
        reply, self.pending[peer] = self.pending[peer], torch.zeros_like(sums)
        self._send_each([peer], STATS_REPLY, pack64(reply), self._stats_decision())

    def _maybe_reply_stats(self) -> None:
        waiting = self.peers.live - self.peers.done
        if self.mode != "bsp" or not self.stats_round or set(self.stats_round) < waiting:
            return
        peers = sorted(self.stats_round)
        nsums = self.stats_round[peers[0]][1]
        rows = {r: row for p in peers for r, row in self.stats_round[p][0].items()}
        total = self._sum_rows(rows, nsums)
        self.on_stats(total, rows, self.live_workers())
        decision = self._stats_decision()  # one answer for the round: every worker stops alike
        self.stats_round = {}
        self._send_each(peers, STATS_REPLY, pack64(total), decision)

    def _stats_decision(self) -> Decision | None:
        """A statistics reply says 'stop' once the server's algorithm stopped early (its view
        of every worker's counts: under ps-asp/bap the workers' own views are partial), or once
        the server or any worker was interrupted (SIGINT, SIGTERM) or asked to stop
        (``distrl.interrupts``)."""
        self.interrupt = interrupts.merge(self.interrupt, interrupts.note())
        return Decision("stop") if self.should_stop() or self.interrupt else None

    # ---- gradients ---------------------------------------------------------------------------
    def _on_grad(self, worker: int, flat: torch.Tensor, version: int, samples: int) -> None:
        if self.mode == "asp":
            staleness = self.version - version
            self.acc["staleness"].append(staleness)
            scale = 1.0 / (staleness + 1) if self.cfg.dist.ps.staleness_lr else 1.0
            decision = self._decide(flat, lr_scale=scale)
            self.version += 1
            self._send_each([worker], PARAMS, self.learner.flat_param.data, decision)
            return
        k = self.next_round[worker]
        self.next_round[worker] = k + 1
        if k < self.closed:  # BAP: this round was closed by its lifetime
            self.acc["dropped"] += 1
            return
        rnd = self.rounds.setdefault(k, _Round(time.perf_counter()))
        rnd.grads[worker] = (flat, samples, version)
        waiting = self.peers.live - self.peers.done
        if set(rnd.grads) >= waiting and k == self.closed:
            self._close_round(k)
            # later rounds that were already complete close in order
            while self.closed in self.rounds and set(self.rounds[self.closed].grads) >= waiting:
                self._close_round(self.closed)

    def _close_round(self, k: int) -> None:
        """Average the round's gradients, decide and step, and send every live worker the new
        parameters (BSP, BAP). Rounds close in order."""
        while self.closed <= k:
            rnd = self.rounds.pop(self.closed, None)
            self.closed += 1
            if rnd is None or not rnd.grads:
                continue
            workers = sorted(rnd.grads)
            flat = mean_gradient([rnd.grads[w][:2] for w in workers])
            for w in workers:
                self.acc["staleness"].append(self.version - rnd.grads[w][2])
            decision = self._decide(flat)
            self.version += 1
            live = sorted(self.peers.live - self.peers.done)
            self._send_each(live, PARAMS, self.learner.flat_param.data, decision)

    def _decide(self, flat: torch.Tensor, lr_scale: float = 1.0) -> Decision:
        """The learner decides from the combined tail and steps (``decide_and_step``)."""
        self.learner.flat.copy_(flat)
        decision = decide_and_step(self.learner, self.learner.flat, lr_scale)
        key = {"step": "steps", "skip": "skipped", "stop": "stopped"}[decision.action]
        self.acc[key] += 1
        self.lr = self.learner.lr
        if decision.action == "step":
            self.acc["sums"] = [
                a + b for a, b in zip(self.acc["sums"], decision.stats, strict=True)
            ]
        return decision

    # ---- what the server logs ----------------------------------------------------------------
    def _fresh(self) -> dict[str, Any]:
        return {
            "steps": 0,
            "skipped": 0,
            "stopped": 0,
            "sums": [0.0] * 5,
            "staleness": [],
            "dropped": 0,
            "t0": time.perf_counter(),
        }

    def _metrics(self) -> dict[str, Any]:
        acc, now = self.acc, time.perf_counter()
        st = acc["staleness"]
        out: dict[str, Any] = decision_metrics(acc["sums"], acc["steps"])
        out |= {
            "lr": self.lr,
            "train/updates": acc["steps"],
            "train/skipped_updates": acc["skipped"],
            "train/early_stop": float(acc["stopped"] > 0),
            "dist/version": self.version,
            "dist/staleness_mean": sum(st) / len(st) if st else 0.0,
            "dist/staleness_max": max(st) if st else 0,
            "dist/dropped": acc["dropped"],
            "dist/server_wait": self.peers.wait,
            "dist/workers": len(self.live_workers()),
            "time/iteration": now - acc["t0"],
        }
        if self.peers.messages:
            out["messages"] = self.peers.take_messages()
        self.peers.wait = 0.0
        self.acc = self._fresh()
        return out
