"""Parameter-server strategies: bulk synchronous (BSP), asynchronous (ASP) and bounded
staleness (BAP), after MALib's parameter-server modes. Rank 0 serves: it holds the
authoritative parameters, the optimizer, the learning rate and the normalizer, and takes every
decision (skip on NaN/Inf, early stop on KL, adaptive LR). Ranks 1.. are workers: they collect,
compute gradients, and apply the parameters the server sends back.

Transport (``distributed/transport.py``, shared with learner-actor): fixed-size float32
messages in a pair group per worker, one receiver thread per peer, sends with a deadline.

Messages (``distributed/messages.py``): worker -> server a ``WorkerHeader`` (kind, sender,
version, iteration, samples, part, parts, nsums, length), server -> worker a ``ServerHeader``
(kind, version, action, lr, the decision statistics, part, parts, length), each followed by its
payload and padded to one fixed size per direction. Payloads longer than one message
(statistics of tiny models, checkpoint state) travel in parts.

Modes (per minibatch; a "round" is each worker's r-th gradient):

- **BSP**: the server waits for every live worker's gradient of the round, averages them
  (sample-weighted; the plain mean, in rank order, when the counts are equal, which is then
  bit-for-bit what ``allreduce`` computes), decides, steps, and sends the new parameters and
  the decision to every worker. Statistics rounds (advantage moments, normalizer) are summed
  over all workers the same way, so BSP reproduces ``allreduce``.
- **ASP**: the server applies each gradient as it arrives and replies to that worker only.
  Staleness = versions applied since the worker's parameters were sent.
- **BAP**: rounds as BSP, but a worker keeps computing with its cached parameters while fewer
  than ``--dist.ps.staleness`` rounds are outstanding; a round open longer than
  ``--dist.ps.lifetime`` seconds is closed with the gradients that came, and the late ones of
  that round are dropped and counted.

Under ASP and BAP each worker normalizes advantages and merges observation moments with every
statistics message the server received since its last one (its own included), so all replicas
see the same data, in a different order than the server (float rounding only).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn

from distrl import interrupts
from distrl.algorithms.ppo import Decision, GradientLearner
from distrl.config import TrainConfig
from distrl.distributed.base import (
    Agreed,
    Links,
    Roles,
    ServerEvent,
    StatsLayout,
    StatsSink,
)
from distrl.distributed.collectives import Collectives
from distrl.distributed.context import DistContext
from distrl.distributed.liveness import PeerFailure, release_dropped
from distrl.distributed.messages import ServerHeader, WorkerHeader
from distrl.distributed.transport import (
    Inbox,
    bytes_payload,
    coordinator_wait,
    framed_parts,
    from_bytes_payload,
    pack64,
    pair_groups,
    read_checked,
    receiver,
    send,
    unpack64,
)

SERVER = 0
# worker -> server kinds
STATS, GRAD, STATE, DONE = 1, 2, 3, 4
# server -> worker kinds
PARAMS, STATS_REPLY, BYE = 1, 2, 3
ACTIONS: tuple[Literal["step", "skip", "stop"], ...] = ("step", "skip", "stop")


class WorkerLost(PeerFailure):
    """The server could not send to a worker."""

    def __init__(self, worker: int, message: str):
        super().__init__(message)
        self.worker = worker


# ---- the strategy -----------------------------------------------------------------------------


class ParameterServer(Collectives):
    """``--dist.strategy ps-bsp|ps-asp|ps-bap``: the worker side (``setup``, ``step``,
    ``reduce_stats``, ``gather_object``, ``finish``) and the server loop (``serve``)."""

    def __init__(self, ctx: DistContext, cfg: TrainConfig, mode: str):
        super().__init__(ctx, profile_sync=False, timeout=cfg.dist.timeout)
        if not self.active:
            raise ValueError(
                f"--dist.strategy ps-{mode} needs at least 2 processes (rank 0 serves, the "
                f"others work); use e.g. --nproc 3 for 2 workers"
            )
        self.mode, self.cfg = mode, cfg
        self.stats_agreed = mode == "bsp"  # asp/bap: what the server got since the last reply
        self.pairs = pair_groups([SERVER], list(range(1, ctx.world_size)), cfg.dist.timeout)
        self.name = f"ps-{mode}"
        server = ctx.rank == SERVER
        self.roles = Roles(collector=not server, learner=not server, server=server)
        if server:
            self.links = Links(server=self)
        # Worker r seeds as all-reduce rank r - 1 would (the server as rank 0, whose replica
        # every rank starts from), so one --seed gives ps-* and allreduce the same worker data.
        self.seed_rank = max(ctx.rank - 1, 0)
        self.workers = list(range(1, self.world_size))
        self.inbox: Inbox | None = None
        self.version = 0  # parameter version this worker holds (server: the newest)
        self.rounds_sent = 0
        self.last = Decision("step", (0.0,) * 5)
        self.stop_seen = False  # BAP: a 'stop' arrived while this iteration was running
        self.stop_requested = False  # the server's algorithm stopped early (Strategy protocol)
        self.iteration_first_round = 0
        self._iteration = 0  # the iteration this worker is in (set by heartbeat)
        self.capacity = 0

    # ---- shape of the messages ---------------------------------------------------------------
    def _alloc(self, num_grad: int) -> None:
        self.num_grad = num_grad
        self.capacity = max(num_grad + 6, 4096)

    def _up(self, kind: int, payload: torch.Tensor, **h: int) -> None:
        def header(part: int, parts: int, length: int) -> WorkerHeader:
            return WorkerHeader(
                kind,
                sender=self.rank,
                version=self.version,
                iteration=h.get("iteration", 0),
                samples=h.get("samples", 0),
                part=part,
                parts=parts,
                nsums=h.get("nsums", 0),
                signal=interrupts.note(),  # the server stops the run (distrl.interrupts)
                length=length,
            )

        for msg in framed_parts(payload, self.capacity, header):
            try:
                self._timed(self._send, msg, SERVER)
            except PeerFailure as e:
                raise PeerFailure(
                    f"rank {self.rank}/{self.world_size}: lost the parameter server (rank 0) "
                    f"while sending to it: {str(e).split('Backend: ')[-1]}"
                ) from e

    def _down(
        self, worker: int, kind: int, payload: torch.Tensor, decision: Decision | None = None
    ) -> None:
        d = decision or Decision("step", (0.0,) * 5)
        kl, pg, vl, ent, cf = d.stats or (0.0,) * 5

        def header(part: int, parts: int, length: int) -> ServerHeader:
            return ServerHeader(
                kind,
                version=self.version,
                action=ACTIONS.index(d.action),
                lr=self.lr,
                approx_kl=kl,
                pg_loss=pg,
                v_loss=vl,
                entropy=ent,
                clipfrac=cf,
                part=part,
                parts=parts,
                length=length,
            )

        for msg in framed_parts(payload, self.capacity, header):
            try:
                self._timed(self._send, msg, worker)
            except PeerFailure as e:
                raise WorkerLost(
                    worker,
                    f"rank 0/{self.world_size} (parameter server): could not send to worker "
                    f"rank {worker}: {str(e).split('Backend: ')[-1]}",
                ) from e

    def _send(self, msg: torch.Tensor, peer: int) -> None:
        send(msg, peer, self._pair(peer), self.timeout)

    # ---- worker side -------------------------------------------------------------------------
    @property
    def num_collectors(self) -> int:
        return len(self.workers)

    @property
    def collector_index(self) -> int:
        return self.rank - 1  # the server (rank 0) collects nothing: -1

    @property
    def measures_sync(self) -> bool:
        return False

    def setup(self, policy: nn.Module, learner: GradientLearner) -> None:
        """Rank 0's replica reaches every worker (one coalesced broadcast, as allreduce), then
        each process starts its receiver threads."""
        self.policy, self.learner = policy, learner
        self.check_install(policy)
        self.lr = float(learner.optimizer.param_groups[0]["lr"])
        self._alloc(learner.num_grad)
        tensors = list(policy.parameters()) + list(policy.buffers())
        self.broadcast_tensors_(tensors)
        if self.roles.server:
            size = WorkerHeader.size() + self.capacity
            self.inbox = Inbox(self.workers, size, DONE, receiver(size, self._pair))
        else:
            size = ServerHeader.size() + self.capacity
            self.inbox = Inbox([SERVER], size, BYE, receiver(size, self._pair))

    def _pair(self, peer: int) -> Any:
        """The process group of this rank and ``peer`` (the server and one worker)."""
        return self.pairs[(SERVER, peer if self.roles.server else self.rank)]

    def _receive(self, want: int) -> tuple[ServerHeader, torch.Tensor]:
        """Block until the server's next ``want`` message (parameters that arrive first are
        applied on the way); returns (header, payload), parts joined."""
        parts: list[torch.Tensor] = []
        while True:
            got = self._next_from_server(block=True)
            assert got is not None  # a blocking wait raises instead
            header, payload = got
            kind = header.kind
            if kind == PARAMS:
                self._apply_params(header, payload)
                if want == PARAMS:
                    return header, payload
                continue
            if kind != want:
                raise RuntimeError(f"rank {self.rank}: expected message {want}, got {kind}")
            parts.append(payload)
            if header.part == header.parts - 1:
                return header, torch.cat(parts)

    def _next_from_server(self, block: bool) -> tuple[ServerHeader, torch.Tensor] | None:
        t0 = time.perf_counter()
        assert self.inbox is not None, "setup() starts the receiver threads"
        inbox = self.inbox
        wait = coordinator_wait(self.timeout)
        got = inbox.wait(wait, self.rank, self.timeout) if block else inbox.get(0.0)
        self.comm_time += time.perf_counter() - t0
        if got is None:
            if not block:
                return None
            raise PeerFailure(
                f"rank {self.rank}/{self.world_size}: the parameter server (rank 0) sent nothing "
                f"for {coordinator_wait(self.timeout):g} s (2 x --dist.timeout + 5); it died "
                f"or stalled"
            )
        _, msg = got
        if isinstance(msg, Exception):
            raise PeerFailure(
                f"rank {self.rank}/{self.world_size}: lost the parameter server (rank 0): "
                f"{str(msg).strip().splitlines()[0]}"
            ) from msg
        return ServerHeader.read(msg), ServerHeader.payload(msg)

    def _apply_params(self, header: ServerHeader, payload: torch.Tensor) -> None:
        self.version = header.version
        action = ACTIONS[header.action]
        self.last = Decision(action, header.stats)
        if action == "stop" and self.version > self.iteration_first_round:
            self.stop_seen = True  # a round of the current iteration was stopped
        self.learner.flat_param.data.copy_(payload[: self.num_grad])

    def step(self, learner: GradientLearner, flat: torch.Tensor) -> Decision:
        """Send this minibatch's gradient; BSP/ASP wait for the answer, BAP only while too many
        rounds are outstanding."""
        if self.stop_seen:  # BAP: an earlier round of this iteration was stopped
            return Decision("stop")
        samples = self._minibatch_samples
        self._up(GRAD, flat, samples=samples)
        self.rounds_sent += 1
        if self.mode == "bap":
            while True:
                got = self._next_from_server(block=False)
                if got is None:
                    break
                self._apply_params(*got)
            while self.rounds_sent - self.version >= self.cfg.dist.ps.staleness:
                self._receive(PARAMS)
            if self.stop_seen:
                return Decision("stop")
            return Decision("step", self.last.stats or (0.0,) * 5)
        self._receive(PARAMS)
        return self.last

    @property
    def _minibatch_samples(self) -> int:
        a = self.cfg.agent
        return self.cfg.env.num_envs * a.num_steps // a.num_minibatches

    def reduce_stats(
        self, sums: dict[str, torch.Tensor], gather: dict[str, torch.Tensor] | None = None
    ) -> Agreed:
        """Worker: send this rollout's statistics to the server; the sums come back combined
        (BSP: over this round's workers; ASP/BAP: over every statistics message the server got
        since this worker's last one). Gathered values stay local (only the server logs)."""
        gather = gather or {}
        self.stop_seen = False
        self.iteration_first_round = self.rounds_sent
        layout = StatsLayout.of(sums, gather)
        row = layout.pack(sums, gather)
        self._up(STATS, pack64(row), iteration=self._iteration, nsums=layout.num_sums)
        header, reply = self._receive(STATS_REPLY)
        if ACTIONS[header.action] == "stop":  # the server's early stop, or an interrupt
            self.stop_requested = True
        total = unpack64(reply[: 2 * layout.num_sums])
        device = next(iter(sums.values())).device
        sums = {k: v.to(device) for k, v in layout.unpack_sums(total).items()}
        out = Agreed(sums=sums, ranks=(self.rank,))  # this worker's row alone: no collectors
        out.gathered = {k: v.unsqueeze(0) for k, v in layout.unpack_gather(row).items()}
        return out

    def heartbeat(self, iteration: int) -> None:
        self._iteration = iteration
        super().heartbeat(iteration)

    def gather_object(self, obj: Any, dst: int = 0) -> list[Any] | None:
        """Worker: its checkpoint state goes to the server as words (not collective: a dead
        worker cannot block a checkpoint)."""
        self._up(STATE, bytes_payload(obj), iteration=self._iteration + 1)
        return None

    def verify_replicas(self, module: nn.Module) -> None:
        """The server's parameters are authoritative; workers may hold older versions (ASP,
        BAP), so there is nothing to compare."""

    def finish(self) -> None:
        """Worker: say DONE and wait for the server's BYE (its last parameters arrive first)."""
        self._up(DONE, torch.zeros(1), iteration=self._iteration + 1)
        self._receive(BYE)

    # ---- the server's link (runner.roles.serve) --------------------------------------------
    def release(self) -> list[str]:
        """After the loop: its last messages, then the dropped workers are told to leave (exit 0)
        instead of holding torchrun's agent forever."""
        out = list(self._loop.messages)
        wait = coordinator_wait(self.timeout) + 5.0
        for r in release_dropped(self._loop.dropped, wait=wait):
            out.append(
                f"parameter server: dropped rank {r} did not leave; the launcher waits for it "
                f"(end it with kill if it is stopped on another machine)"
            )
        return out

    def serve(
        self,
        on_stats: StatsSink,
        start_iteration: int = 0,
        should_stop: Callable[[], bool] = lambda: False,
    ) -> Iterator[ServerEvent]:
        """The server loop; yields an event per completed iteration and per checkpoint.

        ``on_stats(summed sums, {worker: its whole statistics row}, live workers)`` lets the
        algorithm take in the statistics (``Runner.absorb``: normalizers, episode windows,
        counts; a dropped worker's windows no longer count)."""
        self._loop = _ServerLoop(self, on_stats, start_iteration, should_stop)
        return self._loop.run()


@dataclass
class _Round:
    opened: float
    grads: dict[int, tuple[torch.Tensor, int, int]] = field(default_factory=dict)


class _ServerLoop:
    def __init__(
        self,
        ps: ParameterServer,
        on_stats: StatsSink,
        start_iteration: int,
        should_stop: Callable[[], bool],
    ):
        self.ps, self.on_stats, self.should_stop = ps, on_stats, should_stop
        self.mode, self.learner = ps.mode, ps.learner
        self.live = set(ps.workers)
        now = time.perf_counter()
        self.last_seen = dict.fromkeys(self.live, now)
        self.started = now
        self.completed = dict.fromkeys(self.live, start_iteration)  # iterations finished
        self.done: set[int] = set()
        self.parts: dict[int, list[torch.Tensor]] = {w: [] for w in self.live}
        self.rounds: dict[int, _Round] = {}
        self.next_round = dict.fromkeys(self.live, 0)  # per worker: its next gradient's round
        self.closed = 0  # rounds < closed are finished (BSP/BAP)
        self.stats_round: dict[int, tuple[torch.Tensor, int]] = {}
        self.pending: dict[int, torch.Tensor] = {}  # async: sums not yet sent to each worker
        self.states: dict[int, dict[int, Any]] = {}
        self.latest: dict[int, Any] = {}  # each worker's newest state
        self.dropped: dict[int, str] = {}  # worker -> why
        self.iteration = min(self.completed.values())
        self.messages: list[str] = []
        self.acc = self._fresh()

    def _fresh(self) -> dict[str, Any]:
        return {
            "steps": 0,
            "skipped": 0,
            "stopped": 0,
            "sums": [0.0] * 5,
            "staleness": [],
            "dropped": 0,
            "wait": 0.0,
            "t0": time.perf_counter(),
        }

    # ---- main loop ---------------------------------------------------------------------------
    def run(self) -> Iterator[ServerEvent]:
        ps = self.ps
        assert ps.inbox is not None, "setup() starts the receiver threads"
        while self.live - self.done:
            deadline = self._deadline()
            t0 = time.perf_counter()
            got = ps.inbox.get(deadline - t0)
            self.acc["wait"] += time.perf_counter() - t0
            if got is None:
                self._on_silence()
                yield from self._catch_up()  # a dropped worker no longer holds iterations back
                continue
            worker, msg = got
            if isinstance(msg, Exception):
                self._lost(worker, f"its connection failed: {str(msg).splitlines()[0]}")
                yield from self._catch_up()
                continue
            self.last_seen[worker] = time.perf_counter()
            if worker not in self.live:
                continue
            try:
                yield from self._handle(worker, msg)
            except WorkerLost as e:
                self._lost(e.worker, f"sending to it failed ({e})")
        for w in sorted(self.live):
            with contextlib.suppress(WorkerLost):  # it finished and left: nothing to tell it
                ps._down(w, BYE, torch.zeros(1))

    def _deadline(self) -> float:
        now = time.perf_counter()
        d = now + min(self.ps.timeout, 1.0)
        if self.mode == "bap" and self.rounds:
            oldest = min(r.opened for k, r in self.rounds.items() if k >= self.closed)
            d = min(d, oldest + self.ps.cfg.dist.ps.lifetime)
        return d

    def _on_silence(self) -> None:
        now = time.perf_counter()
        if self.mode == "bap":
            for k in sorted(self.rounds):
                if k >= self.closed and now - self.rounds[k].opened > self.ps.cfg.dist.ps.lifetime:
                    self._close_round(k)
        for w in sorted(self.live - self.done):
            silent = now - self.last_seen[w]
            if silent > self.ps.timeout:
                self._lost(w, f"it sent nothing for {silent:.1f} s (--dist.timeout)")

    def _lost(self, worker: int, why: str) -> None:
        if worker not in self.live:
            return
        it = self.completed.get(worker, 0)
        if self.mode == "bsp":
            raise PeerFailure(
                f"rank 0/{self.ps.world_size} (parameter server, ps-bsp): worker rank {worker} "
                f"lost at iteration {it}: {why}. BSP needs every worker; ps-asp and ps-bap go "
                f"on without it"
            )
        self.live.discard(worker)
        self.dropped[worker] = f"the parameter server dropped it at iteration {it}: {why}"
        self.ps_message(
            f"parameter server: dropped worker rank {worker} (last seen at iteration {it}): "
            f"{why}; training goes on with ranks {sorted(self.live)}"
        )
        if not self.live:
            raise PeerFailure("parameter server: every worker was lost")
        # rounds and statistics no longer wait for it
        for k in sorted(self.rounds):
            if k >= self.closed and set(self.rounds[k].grads) >= self.live - self.done:
                self._close_round(k)
        self._maybe_reply_stats()

    def ps_message(self, text: str) -> None:
        self.messages.append(text)

    # ---- messages ----------------------------------------------------------------------------
    def _handle(self, worker: int, msg: torch.Tensor) -> Iterator[ServerEvent]:
        kinds = (STATS, GRAD, STATE, DONE)
        head, why = read_checked(WorkerHeader, msg, worker, self.ps.capacity, kinds)
        if head is not None and head.version > self.ps.version:
            why = f"parameter version {head.version}, ahead of the server's {self.ps.version}"
        if head is None or why is not None:
            self._lost(worker, f"it sent {why}")
            return
        payload = WorkerHeader.payload(msg)
        if head.signal:  # the worker was interrupted or asked to stop: stop the run
            self._interrupted(head.signal)
        kind, part, parts = head.kind, head.part, head.parts
        if parts > 1:
            self.parts[worker].append(payload)
            if part < parts - 1:
                return
            payload = torch.cat(self.parts[worker])
            self.parts[worker] = []
        n = self.ps.num_grad + 6
        if kind == GRAD and payload.numel() != n:
            self._lost(worker, f"it sent a gradient of {payload.numel()} words, not {n}")
            return
        if kind == STATS and not 0 < 2 * head.nsums <= payload.numel():
            self._lost(
                worker, f"it sent statistics of {head.nsums} sums in {payload.numel()} words"
            )
            return
        if kind == GRAD:
            self._on_grad(worker, payload, version=head.version, samples=head.samples)
        elif kind == STATS:
            yield from self._advance(worker, head.iteration)
            self._on_stats(worker, payload, nsums=head.nsums)
        elif kind == STATE:
            it = head.iteration
            state = self.latest[worker] = from_bytes_payload(payload)
            self.states.setdefault(it, {})[worker] = state
            yield from self._maybe_checkpoint()
        elif kind == DONE:
            self.done.add(worker)
            yield from self._advance(worker, head.iteration)
            # rounds and stats no longer wait for a finished worker
            for k in sorted(self.rounds):
                if k >= self.closed and set(self.rounds[k].grads) >= self.live - self.done:
                    self._close_round(k)
            yield from self._maybe_checkpoint()

    def _advance(self, worker: int, completed: int) -> Iterator[ServerEvent]:
        self.completed[worker] = completed
        yield from self._catch_up()

    def _catch_up(self) -> Iterator[ServerEvent]:
        """An event per iteration that every live worker completed, then due checkpoints."""
        if not self.live:
            return
        current = min(self.completed[w] for w in self.live)
        while self.iteration < current:
            self.iteration += 1
            yield ServerEvent("iteration", self.iteration, self._metrics())
        yield from self._maybe_checkpoint()

    def _maybe_checkpoint(self) -> Iterator[ServerEvent]:
        """A checkpoint of iteration ``it`` once every live worker's state of it arrived; a
        worker that finished earlier (an early stop seen only by it, under ps-asp/bap) stands
        in with its final state."""
        for it in sorted(self.states):
            have = self.states[it]
            stand_in = {w: self.latest[w] for w in self.live & self.done if w not in have}
            if set(have) | set(stand_in) >= self.live:
                yield ServerEvent("checkpoint", it, states=stand_in | self.states.pop(it))

    # ---- statistics --------------------------------------------------------------------------
    def _on_stats(self, worker: int, payload: torch.Tensor, nsums: int) -> None:
        row = unpack64(payload)
        if self.mode == "bsp":
            self.stats_round[worker] = (row, nsums)
            self._maybe_reply_stats()
            return
        sums = row[:nsums]
        self.on_stats(sums, {worker: row}, self.live)
        for w in self.live:
            self.pending[w] = self.pending[w] + sums if w in self.pending else sums.clone()
        reply, self.pending[worker] = self.pending[worker], torch.zeros_like(sums)
        self.ps._down(worker, STATS_REPLY, pack64(reply), self._stats_decision())

    def _maybe_reply_stats(self) -> None:
        waiting = self.live - self.done
        if self.mode != "bsp" or not self.stats_round or set(self.stats_round) < waiting:
            return
        workers = sorted(self.stats_round)
        nsums = self.stats_round[workers[0]][1]
        total = self.stats_round[workers[0]][0][:nsums].clone()
        for w in workers[1:]:
            total += self.stats_round[w][0][:nsums]
        self.on_stats(total, {w: self.stats_round[w][0] for w in workers}, self.live)
        decision = self._stats_decision()  # one answer for the round: every worker stops alike
        for w in workers:
            self.ps._down(w, STATS_REPLY, pack64(total), decision)
        self.stats_round = {}

    def _stats_decision(self) -> Decision | None:
        """A statistics reply says 'stop' once the server's algorithm stopped early (its view
        of every worker's counts: under ps-asp/bap the workers' own views are partial), or once
        the server or any worker was interrupted (SIGINT, SIGTERM) or asked to stop
        (``distrl.interrupts``)."""
        self._interrupted(interrupts.note())
        return Decision("stop") if self.should_stop() or self.ps.interrupt else None

    def _interrupted(self, note: int) -> None:
        self.ps.interrupt = interrupts.merge(self.ps.interrupt, note)

    # ---- gradients ---------------------------------------------------------------------------
    def _on_grad(self, worker: int, flat: torch.Tensor, version: int, samples: int) -> None:
        n = self.ps.num_grad + 6
        if self.mode == "asp":
            staleness = self.ps.version - version
            self.acc["staleness"].append(staleness)
            scale = 1.0 / (staleness + 1) if self.ps.cfg.dist.ps.staleness_lr else 1.0
            decision = self._decide(flat[:n], lr_scale=scale)
            self.ps.version += 1
            self.ps._down(worker, PARAMS, self.learner.flat_param.data, decision)
            return
        k = self.next_round[worker]
        self.next_round[worker] = k + 1
        if k < self.closed:  # BAP: this round was closed by its lifetime
            self.acc["dropped"] += 1
            return
        rnd = self.rounds.setdefault(k, _Round(time.perf_counter()))
        rnd.grads[worker] = (flat[:n].clone(), samples, version)
        if set(rnd.grads) >= self.live - self.done and k == self.closed:
            self._close_round(k)
            # later rounds that were already complete close in order
            while self.closed in self.rounds and (
                set(self.rounds[self.closed].grads) >= self.live - self.done
            ):
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
            counts = [rnd.grads[w][1] for w in workers]
            flat = rnd.grads[workers[0]][0].clone()
            if len(set(counts)) == 1:  # equal samples: sum then divide, as allreduce does
                for w in workers[1:]:
                    flat += rnd.grads[w][0]
                if len(workers) > 1:
                    flat.div_(len(workers))
            else:  # sample-weighted mean
                flat.mul_(counts[0])
                for w, c in zip(workers[1:], counts[1:], strict=True):
                    flat.add_(rnd.grads[w][0], alpha=c)
                flat.div_(sum(counts))
            for w in workers:
                self.acc["staleness"].append(self.ps.version - rnd.grads[w][2])
            decision = self._decide(flat)
            self.ps.version += 1
            for w in sorted(self.live - self.done):
                self.ps._down(w, PARAMS, self.learner.flat_param.data, decision)

    def _decide(self, flat: torch.Tensor, lr_scale: float = 1.0) -> Decision:
        """The learner decides from the combined tail and steps; ``lr_scale`` shrinks this one
        step only (ASP's staleness-aware LR), leaving the LR state untouched."""
        learner = self.learner
        learner.flat.copy_(flat)
        decision = learner.decide(learner.flat)
        if decision.action == "step":
            groups = learner.optimizer.param_groups
            for g in groups:
                g["lr"] = learner.lr * lr_scale
            learner.apply()
            for g in groups:
                g["lr"] = learner.lr
            self.acc["steps"] += 1
            self.acc["sums"] = [
                a + b for a, b in zip(self.acc["sums"], decision.stats, strict=True)
            ]
        elif decision.action == "skip":
            self.acc["skipped"] += 1
        else:
            self.acc["stopped"] += 1
        self.ps.lr = learner.lr
        return decision

    # ---- what the server logs ----------------------------------------------------------------
    def _metrics(self) -> dict[str, Any]:
        acc, now = self.acc, time.perf_counter()
        steps = max(acc["steps"], 1)
        names = ("approx_kl", "loss/policy", "loss/value", "loss/entropy", "clipfrac")
        st = acc["staleness"]
        out: dict[str, Any] = {k: v / steps for k, v in zip(names, acc["sums"], strict=True)}
        out |= {
            "lr": self.ps.lr,
            "train/updates": acc["steps"],
            "train/skipped_updates": acc["skipped"],
            "train/early_stop": float(acc["stopped"] > 0),
            "dist/version": self.ps.version,
            "dist/staleness_mean": sum(st) / len(st) if st else 0.0,
            "dist/staleness_max": max(st) if st else 0,
            "dist/dropped": acc["dropped"],
            "dist/server_wait": acc["wait"],
            "dist/workers": len(self.live),
            "time/iteration": now - acc["t0"],
        }
        if self.messages:
            out["messages"] = list(self.messages)
            self.messages.clear()
        self.acc = self._fresh()
        return out
