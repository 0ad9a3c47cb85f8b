"""A parameter server's worker (ranks 1..): it collects and learns as an all-reduce rank does,
but its gradients and statistics go to the server (rank 0), and the parameters, the decision and
the combined statistics come back. A peer of the server on the peer layer
(``distributed/peers.py``); the scheme is ``param_server.py``'s."""

from __future__ import annotations

import time
from typing import Any

import torch

from distrl import interrupts
from distrl.algorithms.ppo import Decision, GradientLearner
from distrl.distributed.base import Agreed, StatsLayout
from distrl.distributed.messages import ServerHeader, WorkerHeader
from distrl.distributed.param_server import (
    ACTIONS,
    BYE,
    DONE,
    GRAD,
    NO_STATS,
    PARAMS,
    SERVER,
    STATE,
    STATS,
    STATS_REPLY,
    PSRank,
)
from distrl.distributed.peers import Peer
from distrl.distributed.transport import Inbox, bytes_payload, pack64, receiver, unpack64


class PSWorker(PSRank):
    """``--dist.strategy ps-*`` on ranks 1..: ``step`` and ``reduce_stats`` through the server,
    ``finish`` says DONE and waits for BYE."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.rounds_sent = 0
        self.last = Decision("step", NO_STATS)
        self.stop_seen = False  # BAP: a 'stop' arrived while this iteration was running
        self.stop_requested = False  # the server's algorithm stopped early (Strategy protocol)
        self.iteration_first_round = 0
        self._iteration = 0  # the iteration this worker is in (set by heartbeat)

    def start(self) -> None:
        up = self.up = self.tree.parent(self.rank)  # the server, or this rank's sink node
        size = ServerHeader.size() + self.capacity
        inbox = Inbox([up], size, BYE, receiver(size, lambda c: self.pair(self.rank, c)))
        named = "the parameter server (rank 0)" if up == SERVER else f"its sink node (rank {up})"
        self.peer = Peer(
            label=f"rank {self.rank}/{self.world_size}",
            name_of=lambda c: named,
            coordinators=[up],
            inbox=inbox,
            capacity=self.capacity,
            group_of=lambda c: self.pair(self.rank, c),
            timeout=self.timeout,
            rank=self.rank,
        )

    # ---- to the server -----------------------------------------------------------------------
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

        self.comm_time += self.peer.send(self.up, header, payload)

    # ---- from the server ---------------------------------------------------------------------
    def _receive(self, want: int) -> tuple[ServerHeader, torch.Tensor]:
        """Block until the server's next ``want`` message (parameters that arrive first are
        applied on the way); returns (header, payload), parts joined."""
        parts: list[torch.Tensor] = []
        while True:
            header, payload = self._next(block=True)  # type: ignore[misc]  # blocking: never None
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

    def _next(self, block: bool) -> tuple[ServerHeader, torch.Tensor] | None:
        t0 = time.perf_counter()
        got = self.peer.next(block)
        self.comm_time += time.perf_counter() - t0
        if got is None:
            return None
        msg = got[1]
        return ServerHeader.read(msg), ServerHeader.payload(msg)

    def _apply_params(self, header: ServerHeader, payload: torch.Tensor) -> None:
        self.version = header.version
        action = ACTIONS[header.action]
        self.last = Decision(action, header.stats)
        if action == "stop" and self.version > self.iteration_first_round:
            self.stop_seen = True  # a round of the current iteration was stopped
        self.learner.flat_param.data.copy_(payload[: self.num_grad])

    # ---- the Strategy protocol ---------------------------------------------------------------
    def step(self, learner: GradientLearner, flat: torch.Tensor) -> Decision:
        """Send this minibatch's gradient; BSP/ASP wait for the answer, BAP only while too many
        rounds are outstanding."""
        if self.stop_seen:  # BAP: an earlier round of this iteration was stopped
            return Decision("stop")
        self._up(GRAD, flat, samples=self._minibatch_samples)
        self.rounds_sent += 1
        if self.mode == "bap":
            while (got := self._next(block=False)) is not None:
                self._apply_params(*got)
            while self.rounds_sent - self.version >= self.cfg.dist.ps.staleness:
                self._receive(PARAMS)
            if self.stop_seen:
                return Decision("stop")
            return Decision("step", self.last.stats or NO_STATS)
        self._receive(PARAMS)
        return self.last

    @property
    def _minibatch_samples(self) -> int:
        a = self.cfg.agent
        return self.cfg.env.num_envs * a.num_steps // a.num_minibatches

    def reduce_stats(
        self, sums: dict[str, torch.Tensor], gather: dict[str, torch.Tensor] | None = None
    ) -> Agreed:
        """Send this rollout's statistics to the server; the sums come back combined (BSP: over
        this round's workers; ASP/BAP: over every statistics message the server got since this
        worker's last one). Gathered values stay local (only the server logs)."""
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
        """Its checkpoint state goes to the server as words (not collective: a dead worker
        cannot block a checkpoint)."""
        self._up(STATE, bytes_payload(obj), iteration=self._iteration + 1)
        return None

    def finish(self) -> None:
        """Say DONE and wait for the server's BYE (its last parameters arrive first)."""
        self._up(DONE, torch.zeros(1), iteration=self._iteration + 1)
        self._receive(BYE)
