"""An actor of learner-actor (ranks L..): a peer of every learner on the peer layer
(``distributed/peers.py``). It steps its environments with the newest weights it holds, sends
each rollout (and, for a checkpoint, its state) to its learner ((rank - L) % L), and takes in the
weight chunks the routing table names from every learner. The scheme is
``learner_actor.py``'s."""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist

from distrl import interrupts
from distrl.distributed.base import ACT, Role
from distrl.distributed.learner_actor import ABORT, BYE, DONE, ROLLOUT, STATE, WEIGHTS, LARank
from distrl.distributed.liveness import PeerFailure
from distrl.distributed.messages import ActorHeader, LearnerHeader, kind_of
from distrl.distributed.peers import Peer
from distrl.distributed.transport import Inbox, bytes_payload, unpack64


class Actor(LARank):
    """``--dist.strategy learner-actor`` on ranks >= L: the ``ActorLink`` of
    ``runner.roles.act``."""

    role = Role(ACT)

    def __init__(self, ctx: Any, cfg: Any):
        super().__init__(ctx, cfg)
        self.my_learner = (ctx.rank - self.L) % self.L
        self.stop_at: int | None = None  # the version the learners stopped at

    def start(self) -> None:
        self.routes_from = {
            w: [r for r in self.table.receives(self.rank) if r.learner == w] for w in self.learners
        }
        inbox = Inbox(self.learners, 0, (BYE, ABORT), receive=self._receive_weights)
        self.peer = Peer(
            label=f"rank {self.rank}/{self.world_size} (actor)",
            name_of=lambda learner: f"learner rank {learner}",
            coordinators=self.learners,
            inbox=inbox,
            capacity=self.capacity,
            group_of=self.pair,
            timeout=self.timeout,
            rank=self.rank,
        )
        self.arrived: dict[int, dict[int, torch.Tensor]] = {}
        self.byes: set[int] = set()

    def step(self, learner: Any, flat: torch.Tensor) -> Any:
        raise TypeError("an actor computes no gradients: it collects (runner.roles.act)")

    def verify_replicas(self, module: Any) -> None:
        """An actor may hold an older version than the learners (async): nothing to compare."""

    # ---- weights in --------------------------------------------------------------------------
    def _receive_weights(self, learner: int) -> torch.Tensor:
        """Its receiver thread for ``learner``: one header, then (WEIGHTS) this learner's
        chunks."""
        head = torch.empty(LearnerHeader.size())
        group = self.pair(learner)
        dist.recv(head, src=learner, group=group)
        if kind_of(head) != WEIGHTS:
            return head
        routes = self.routes_from[learner]
        payload = torch.empty(sum(r.chunk.numel for r in routes))
        off = 0
        for r in routes:
            n = r.chunk.numel
            dist.recv(payload[off : off + n], src=learner, tag=1 + r.chunk.index, group=group)
            off += n
        return torch.cat([head, payload])

    def await_weights(self, needed: int) -> None:
        """Apply every complete version that has arrived; block until the newest held is at
        least ``needed`` (on-policy: the iteration; async: the iteration minus K)."""
        t0 = time.perf_counter()
        self._pump_weights(block=False)
        while self.version < needed:
            self._pump_weights(block=True)
        self.comm_time += time.perf_counter() - t0

    def _pump_weights(self, block: bool) -> None:
        while (got := self.peer.next(block)) is not None:
            learner, msg = got
            header = LearnerHeader.read(msg)
            kind, version = header.kind, header.version
            if kind == ABORT:
                who = header.failed
                name = f"learner rank {who}" if who >= 0 else "a learner"
                raise PeerFailure(
                    f"rank {self.rank}/{self.world_size} (actor): {name} failed (reported by "
                    f"learner rank {learner}); stopping"
                )
            if kind == WEIGHTS and header.stop and self.stop_at is None:
                # the learners stopped at this version (an interrupt, a stop request, their
                # algorithm's early stop): the actor sends its state for that iteration's
                # checkpoint and stops (runner.roles.act)
                self.stop_at, self.stop_requested = version, True
            if kind == BYE:
                self.byes.add(learner)
                if block and self.byes >= set(self.learners):
                    return
                continue
            self.arrived.setdefault(version, {})[learner] = msg[LearnerHeader.size() :]
            if len(self.arrived[version]) == self.L:
                self._apply(version)
                if block:
                    return

    def _apply(self, version: int) -> None:
        parts = self.arrived.pop(version)
        for v in [v for v in self.arrived if v < version]:
            del self.arrived[v]  # an older incomplete version is never needed again
        if version <= self.version:
            return
        vec = torch.empty(self.sync_numel)
        for learner, payload in parts.items():
            off = 0
            for r in self.routes_from[learner]:
                c = r.chunk
                vec[c.start : c.start + c.numel] = payload[off : off + c.numel]
                off += c.numel
        n = self.ppo.num_grad
        with torch.no_grad():
            self.ppo.flat_param.data.copy_(vec[:n].to(self.ppo.flat_param.device))
            if self.buffer_words:
                words = unpack64(vec[n:])
                off = 0
                for b in self.policy.buffers():
                    b.copy_(words[off : off + b.numel()].view_as(b).to(b.dtype))
                    off += b.numel()
        self.version = version

    # ---- rollouts and states out -------------------------------------------------------------
    def _up(
        self, kind: int, payload: torch.Tensor, iteration: int = 0, seconds: float = 0.0
    ) -> None:
        def header(part: int, parts: int, length: int) -> ActorHeader:
            return ActorHeader(
                kind,
                sender=self.rank,
                version=self.version,
                iteration=iteration,
                seconds=seconds,
                part=part,
                parts=parts,
                signal=interrupts.note(),  # its learner passes it on (interrupt_note)
                length=length,
            )

        self.comm_time += self.peer.send(self.my_learner, header, payload)

    def send_rollout(self, source: Any, iteration: int, seconds: float) -> None:
        """This iteration's rollout (PPO's ``Collector``) or transitions (an off-policy runner),
        with the version of the weights that collected it."""
        self._up(ROLLOUT, self.codec.encode_from(source), iteration=iteration, seconds=seconds)

    def send_state(self, iteration: int, state: Any) -> None:
        """Its checkpoint state for ``iteration``, to its learner."""
        self._up(STATE, bytes_payload(state), iteration=iteration)

    def finish(self) -> None:
        """Wait for the final weights and every learner's BYE, then DONE."""
        while self.byes < set(self.learners):
            self._pump_weights(block=True)
        self._up(DONE, torch.zeros(1))
