"""Learners apart from actors, weights pushed through a routing table:
``--dist.strategy learner-actor --dist.learners L``.

Ranks 0..L-1 learn: they train on their actors' rollouts, with one gradient all-reduce per
minibatch in their own process group (``new_group``), exactly as ``allreduce`` does among all
ranks. Ranks L.. act: they step their environments with the newest weights they hold and send
each rollout to their learner (actor r feeds learner (r - L) % L). New weights reach the actors
through the routing table (distributed/routing.py, LPT): built once from the parameter metadata
on rank 0 and broadcast, then replayed after every update, each learner ``isend``ing its
assigned chunks and each actor receiving, per learner, exactly the chunks the table names.

Transport (``distributed/transport.py``, shared with the parameter server): raw float32
messages with a header, no pickling in the hot path; one receiver thread per peer (``Inbox``)
so that waits have deadlines and a dead peer's closed connection names it; sends with a
timeout.

- actor -> learner: an ``ActorHeader`` (kind, sender, version, iteration, rollout seconds, part,
  parts, length; ``distributed/messages.py``) and its payload, fixed size; the payload is the
  rollout (``RolloutCodec``: obs, uint8 images as bytes, actions, log-probs, values, rewards,
  terminated, truncated, final values, recurrent memory and episode starts, last obs, episode
  window), or a part of the actor's
  checkpoint state, or nothing (DONE);
- learner -> actor: a ``LearnerHeader`` (kind, version, failed rank), then (WEIGHTS) the chunks
  this learner owns for this actor, each its own message, in chunk order. The weights are the
  flat parameters and the buffers (normalizer statistics, as float64 words).

Sync modes. ``on-policy``: an actor waits for version v + 1 before its next rollout, so with one
learner and one actor on the same envs training equals one process. ``async``: an actor goes on
with the newest complete version it holds, and waits only when its next rollout would be more
than ``--dist.max-policy-lag`` K versions old; a learner drops (and counts) any rollout older
than K and trains on the rest with the behaviour log-probs in the PPO ratio (the rollout's own).

Failures: a learner drops a dead actor (closed connection, or silent past --dist.timeout) by
name and trains on the others; an actor stops naming a learner that died; a learner whose
peer learner died tells its actors which one (ABORT) and stops.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import deque
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from distrl import interrupts
from distrl.algorithms.ppo import GradientLearner
from distrl.config import TrainConfig
from distrl.distributed.allreduce import AllReduceStrategy, verify_identical
from distrl.distributed.base import Links, Roles
from distrl.distributed.collectives import Collectives
from distrl.distributed.context import DistContext
from distrl.distributed.liveness import PeerFailure, heartbeats, release_dropped, store_op
from distrl.distributed.messages import ActorHeader, LearnerHeader, kind_of
from distrl.distributed.routing import RoutingTable, routing_table
from distrl.distributed.transport import (
    Inbox,
    bytes_payload,
    coordinator_wait,
    framed_parts,
    from_bytes_payload,
    pack64,
    pack_bytes,
    pair_groups,
    read_checked,
    receiver,
    send,
    unpack64,
    unpack_bytes,
)
from distrl.storage.rollout import WINDOW

# learner -> actor header kinds
WEIGHTS, BYE, ABORT = 1, 2, 3
# actor -> learner kinds
ROLLOUT, STATE, DONE = 1, 2, 3


class RolloutCodec:
    """One actor's rollout <-> one flat float32 payload (fixed layout for a T x N buffer).

    Every field travels as float32 values, but uint8 observations (images) travel as their
    bytes packed four to a word, so a rollout of frames costs what its pixels weigh."""

    def __init__(
        self,
        num_steps: int,
        num_envs: int,
        obs_dim: int,
        act_numel: int,
        num_actions: int | tuple[int, ...] = 0,
        obs_dtype: torch.dtype = torch.float32,
        memory_numel: int = 0,
    ):
        """Payload, in order: the buffer's tensors, a recurrent policy's memory (at the
        rollout's start, and for the last observations) and episode starts, the last
        observations, the return moments (``Moments.to_flat``, float64 as 6 float32 words:
        zeros without reward scaling), the episode window. ``num_actions``: a discrete action
        space's size, or each component's (``nvec``) for multi-discrete actions of
        ``act_numel`` components (0 or (): continuous). ``memory_numel``: one env's memory
        (0: none)."""
        T, N = num_steps, num_envs
        self.T, self.N, self.obs_dim, self.act_numel = T, N, obs_dim, act_numel
        sizes = (num_actions,) * act_numel if isinstance(num_actions, int) else num_actions
        self.num_actions = tuple(sizes) if any(sizes) else ()
        self.packed = obs_dtype == torch.uint8
        # name -> (elements, words on the wire)
        self.fields: dict[str, tuple[int, int]] = {}
        for name, n in (("obs", T * N * obs_dim), ("last_obs", N * obs_dim)):
            self.fields[name] = (n, (n + 3) // 4 if self.packed else n)
        self.fields["actions"] = (T * N * act_numel,) * 2
        for name in ("logprobs", "values", "rewards", "terminated", "truncated", "final_values"):
            self.fields[name] = (T * N,) * 2
        if memory_numel:
            self.fields["memory"] = self.fields["last_memory"] = (N * memory_numel,) * 2
            self.fields["starts"] = (T * N,) * 2
        self.fields["ret"] = (3, 6)
        self.fields["window"] = (WINDOW * 3,) * 2
        self.numel = sum(words for _, words in self.fields.values())

    @classmethod
    def for_policy(cls, policy: Any, num_steps: int, num_envs: int) -> RolloutCodec:
        """The codec of ``policy``'s (an ``ActorCritic``) rollouts of num_steps x num_envs."""
        space = policy.action_space
        act = math.prod(space.shape)  # 1 discrete, K multi-discrete, act_dim continuous
        n = space.sizes if space.categorical else 0
        memory = policy.initial_memory(1).numel()
        return cls(num_steps, num_envs, policy.obs_dim, act, n, policy.obs_dtype, memory)

    def encode(self, source: Any, ret: torch.Tensor) -> torch.Tensor:
        """``source``: the actor's ``Collector`` (its buffer, last observations, memory and
        episode window)."""
        buf, flat = source.buffer, []
        for name in self.fields:
            if name == "ret":
                flat.append(pack64(ret.cpu()))
                continue
            t = {"last_obs": source.obs, "last_memory": source.memory, "window": source.window}
            part = t[name] if name in t else getattr(buf, name)
            if self.packed and name in ("obs", "last_obs"):
                flat.append(pack_bytes(part.cpu()))
            else:
                flat.append(part.detach().reshape(-1).float().cpu())
        payload = torch.cat(flat)
        if payload.numel() != self.numel:  # the learner would drop this actor for it
            raise ValueError(
                f"rollout of {payload.numel()} words, the codec's layout has {self.numel}: the "
                f"buffer does not match the codec's shapes"
            )
        return payload

    def offset(self, name: str) -> int:
        """Where field ``name`` starts in the payload (in words)."""
        names = list(self.fields)
        return sum(self.fields[k][1] for k in names[: names.index(name)])

    def problem(self, payload: torch.Tensor) -> str | None:
        """Why a received rollout cannot be trained on (None if it can): a discrete action
        (or a multi-discrete action's component) that is not an index of its choices would
        index out of the policy's logits."""
        if not self.num_actions:
            return None
        start = self.offset("actions")
        K = len(self.num_actions)
        actions = payload[start : start + self.fields["actions"][1]].view(-1, K)
        sizes = torch.tensor(self.num_actions, dtype=actions.dtype)
        bad = (actions < 0) | (actions >= sizes) | (actions != actions.round())
        if bool(bad.any()):
            row, k = (int(i) for i in bad.nonzero()[0])
            which = f"component {k} of " if K > 1 else ""
            return f"{which}an action {float(actions[row, k])} outside 0..{self.num_actions[k] - 1}"
        return None

    def decode_into(
        self, payload: torch.Tensor, rollouts: Any, slot: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the rollout into columns [slot*N, (slot+1)*N) of ``rollouts`` (the learner's
        ``RemoteRollouts``: its buffer, last observations and memory); returns the actor's
        episode window [WINDOW, 3] and return moments (float64 [3])."""
        cols = slice(slot * self.N, (slot + 1) * self.N)
        buf, off = rollouts.buffer, 0
        ret = window = torch.zeros(0)
        for name, (n, words) in self.fields.items():
            piece = payload[off : off + words]
            off += words
            if name == "window":
                window = piece.view(WINDOW, 3).clone()
                continue
            if name == "ret":
                ret = unpack64(piece)
                continue
            if self.packed and name in ("obs", "last_obs"):
                piece = unpack_bytes(piece, n)
            if name in ("last_obs", "last_memory"):
                dst = (rollouts.obs if name == "last_obs" else rollouts.memory)[cols]
            elif name == "memory":
                dst = buf.memory[cols]
            else:
                dst = getattr(buf, name)[:, cols]
            dst.copy_(piece.view(dst.shape).to(dst.dtype).to(dst.device))
        return window, ret


def merge_windows(windows: list[torch.Tensor]) -> torch.Tensor:
    """The newest WINDOW episodes of several windows (rows (return, length, key); key -1 is an
    empty slot), as one window."""
    rows = torch.cat(windows)
    rows = rows[rows[:, 2] >= 0]
    rows = rows[torch.argsort(rows[:, 2], stable=True)][-WINDOW:]
    pad = torch.full((WINDOW - rows.shape[0], 3), -1.0)
    return torch.cat([pad, rows])


def sync_numels(ppo: GradientLearner, policy: nn.Module) -> tuple[list[int], int]:
    """The weight vector's tensors: every parameter, then the buffers as float64 words."""
    words = 2 * sum(b.numel() for b in policy.buffers())
    return [p.numel() for p in ppo.params] + ([words] if words else []), words


class LearnerActor(Collectives):
    name = "learner-actor"

    def __init__(self, ctx: DistContext, cfg: TrainConfig):
        super().__init__(ctx, profile_sync=False, timeout=cfg.dist.timeout)
        L, W = cfg.dist.learners, ctx.world_size
        if not self.active or W < 2 * L:
            raise ValueError(
                f"--dist.strategy learner-actor with --dist.learners {L} needs at least "
                f"{2 * L} processes (an actor per learner), got {W}"
            )
        self.cfg, self.L = cfg, L
        self.learners, self.actors = list(range(L)), list(range(L, W))
        self.is_learner = ctx.rank < L
        self.mine = [a for a in self.actors if (a - L) % L == ctx.rank]  # a learner's actors
        self.my_learner = (ctx.rank - L) % L
        self.roles = Roles(
            collector=not self.is_learner,
            learner=self.is_learner,
            remote_rollouts=len(self.mine) if self.is_learner else 0,
        )
        self.links = Links(learner=self) if self.is_learner else Links(actor=self)
        self.seed_rank = ctx.rank if self.is_learner else ctx.rank - L
        self.lag_bound = cfg.dist.max_policy_lag if cfg.dist.sync == "async" else 0
        # Every rank creates every group, in the same order. Object collectives get a group of
        # their own so they never share connections with the receiver threads' point-to-point.
        self.learner_group = dist.new_group(self.learners)
        self.object_group = dist.new_group(list(range(W)))
        self.pairs = pair_groups(self.learners, self.actors, cfg.dist.timeout)  # point-to-point
        if self.is_learner:
            self.group, self.group_size = self.learner_group, L
        self.version = 0
        self.live = set(self.mine)  # learner: own actors still alive
        self.targets = set(self.actors)  # learner: actors it still sends weights to
        self.messages: list[str] = []
        self.dropped: dict[int, str] = {}  # learner: actor -> why
        self.heard = 0  # learner: what its actors' headers noted (a signal or a stop request)
        self.stop_at: int | None = None  # actor: the version the learners stopped at
        self._acc = self._fresh()

    @property
    def num_collectors(self) -> int:
        return len(self.actors)

    @property
    def collector_index(self) -> int:
        return -1 if self.is_learner else self.rank - self.L

    @property
    def measures_sync(self) -> bool:
        return False

    # ---- set-up ------------------------------------------------------------------------------
    def setup(self, policy: nn.Module, learner: GradientLearner) -> None:
        """Rank 0's replica reaches every rank (one coalesced broadcast); the routing table is
        computed on rank 0 and broadcast; then every rank starts its receiver threads."""
        self.policy, self.ppo = policy, learner
        self.check_install(policy)
        self.broadcast_tensors_(list(policy.parameters()) + list(policy.buffers()))
        numels, self.buffer_words = sync_numels(learner, policy)
        table = routing_table(numels, self.learners, self.actors) if self.is_main else None
        self.table: RoutingTable = self.broadcast_object(table)
        self.sync_numel = sum(numels)
        self.codec = self._codec(policy)
        self.capacity = max(self.codec.numel, 4096)
        size = ActorHeader.size() + self.capacity
        if self.is_learner:
            self.inbox = Inbox(self.mine, size, DONE, receiver(size, self._pair))
            self.pending: dict[int, deque] = {a: deque() for a in self.mine}
            self.parts: dict[int, list[torch.Tensor]] = {a: [] for a in self.mine}
            self.states: dict[tuple[int, int], Any] = {}
            self.done: set[int] = set()
            self.last_seen = dict.fromkeys(self.mine, time.perf_counter())
        else:
            self.routes_from = {
                w: [r for r in self.table.receives(self.rank) if r.learner == w]
                for w in self.learners
            }
            self.inbox = Inbox(self.learners, 0, (BYE, ABORT), receive=self._receive_weights)
            self.arrived: dict[int, dict[int, torch.Tensor]] = {}
            self.byes: set[int] = set()

    def _codec(self, policy: Any) -> RolloutCodec:
        """``policy``: the runner's ``ActorCritic``."""
        return RolloutCodec.for_policy(policy, self.cfg.agent.num_steps, self.cfg.env.num_envs)

    # ---- the learners' collectives -------------------------------------------------------------
    # one all-reduce per minibatch among the learners (group = their new_group), as allreduce
    step = AllReduceStrategy.step

    def _timed(self, fn, *args, sync: bool = True, **kwargs):
        try:
            return super()._timed(fn, *args, sync=sync, **kwargs)
        except PeerFailure as e:
            if self.is_learner and fn is not dist.gather_object:
                self._abort(e)
            raise

    def interrupt_note(self) -> int:
        """A learner adds its actors' interrupt (or stop request) to its own in the learners'
        exchange."""
        return interrupts.merge(interrupts.note(), self.heard)

    def verify_replicas(self, module: nn.Module) -> None:
        """The learners hold identical parameters (actors may hold older versions in async)."""
        if self.is_learner:
            verify_identical(self, module)

    # ---- weights: learners push, actors receive ------------------------------------------------
    def _sync_vector(self) -> torch.Tensor:
        flat = self.ppo.flat_param.detach().reshape(-1).cpu()
        if not self.buffer_words:
            return flat
        bufs = torch.cat([b.detach().reshape(-1).double().cpu() for b in self.policy.buffers()])
        return torch.cat([flat, pack64(bufs)])

    def push_weights(self, stop: bool = False) -> None:
        """Learner: the new version's chunks to every actor, as the routing table says;
        ``stop``: the learners' algorithm stopped early at this version (every learner decides
        alike from the agreed statistics)."""
        t0 = time.perf_counter()
        self.version += 1
        vec = self._sync_vector()
        sent = 0
        routes = self.table.sends(self.rank)
        for actor in sorted(self.targets):
            # stop: the learners agreed on an interrupt or a stop request this iteration
            # (reduce_stats), or their algorithm stopped early
            halt = int(self.stop_requested or stop)
            head = LearnerHeader(WEIGHTS, version=self.version, failed=-1, stop=halt).words()
            mine = [r for r in routes if r.actor == actor]
            try:
                self._send(head, actor)
                for r in mine:
                    c = r.chunk
                    self._send(vec[c.start : c.start + c.numel], actor, tag=1 + c.index)
                    sent += c.numel * 4
            except RuntimeError as e:
                self._drop(actor, f"sending weights to it failed: {_first_line(e)}")
        dt = time.perf_counter() - t0
        now = time.perf_counter()
        for a in self.live:  # an actor's silence counts from the weights it was just sent
            self.last_seen[a] = now
        self._acc["sync_time"] += dt
        self._acc["sync_bytes"] += sent

    def _pair(self, peer: int) -> Any:
        """The process group of this rank and ``peer`` (one learner and one actor)."""
        return self.pairs[(self.rank, peer) if self.is_learner else (peer, self.rank)]

    def _send(self, t: torch.Tensor, peer: int, tag: int = 0) -> None:
        send(t, peer, self._pair(peer), self.timeout, tag)

    def _receive_weights(self, learner: int) -> torch.Tensor:
        """Actor receiver thread: one header, then (WEIGHTS) this learner's chunks."""
        head = torch.empty(LearnerHeader.size())
        group = self._pair(learner)
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
        """Actor: apply every complete version that has arrived; block until the newest held is
        at least ``needed`` (on-policy: the iteration; async: the iteration minus K)."""
        t0 = time.perf_counter()
        self._pump_weights(block=False)
        while self.version < needed:
            self._pump_weights(block=True)
        self.comm_time += time.perf_counter() - t0

    def _pump_weights(self, block: bool) -> None:
        while True:
            wait = coordinator_wait(self.timeout)
            got = self.inbox.wait(wait, self.rank, self.timeout) if block else self.inbox.get(0.0)
            if got is None:
                if block:
                    raise PeerFailure(
                        f"rank {self.rank}/{self.world_size} (actor): no weights from the "
                        f"learners (ranks {self.learners}) for {wait:g} s (2 x --dist.timeout + "
                        f"5); a learner died or stalled"
                    )
                return
            learner, msg = got
            if isinstance(msg, Exception):
                raise PeerFailure(
                    f"rank {self.rank}/{self.world_size} (actor): lost learner rank {learner}: "
                    f"{_first_line(msg)}"
                ) from msg
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
                # algorithm's early stop): the actor sends its state
                # for that iteration's checkpoint and stops (runner.roles.act)
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

    # ---- rollouts: actors send, learners receive ---------------------------------------------
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

        for msg in framed_parts(payload, self.capacity, header):
            try:
                t0 = time.perf_counter()
                self._send(msg, self.my_learner)
                self.comm_time += time.perf_counter() - t0
            except RuntimeError as e:
                raise PeerFailure(
                    f"rank {self.rank}/{self.world_size} (actor): lost its learner rank "
                    f"{self.my_learner} while sending to it: {_first_line(e)}"
                ) from e

    def send_rollout(self, collector: Any, iteration: int, seconds: float) -> None:
        """Actor: this rollout, with the version of the weights that collected it."""
        ret = collector.return_moments() if collector.scales_rewards else torch.zeros(3)
        payload = self.codec.encode(collector, ret)
        self._up(ROLLOUT, payload, iteration=iteration, seconds=seconds)

    def send_state(self, iteration: int, state: Any) -> None:
        """Actor: its checkpoint state for ``iteration`` to its learner."""
        self._up(STATE, bytes_payload(state), iteration=iteration)

    def _pump(self, timeout: float, expecting: set[int] | None = None) -> None:
        """Learner: handle one message from an actor (or notice silence and dead actors)."""
        t0 = time.perf_counter()
        got = self.inbox.get(min(timeout, 1.0))
        self._acc["wait"] += time.perf_counter() - t0
        now = time.perf_counter()
        if got is None:
            # Only an actor this learner waits on can be silent: one whose rollout is in hand
            # is waiting for the next weights, quiet by design.
            suspects = self.live - self.done if expecting is None else expecting & self.live
            for a in sorted(suspects):
                if now - self.last_seen[a] > self.timeout:
                    self._drop(a, f"it sent nothing for {now - self.last_seen[a]:.1f} s")
            return
        actor, msg = got
        if isinstance(msg, Exception):
            self._drop(actor, f"its connection failed: {_first_line(msg)}")
            return
        self.last_seen[actor] = now
        kinds = (ROLLOUT, STATE, DONE)
        head, why = read_checked(ActorHeader, msg, actor, self.capacity, kinds)
        payload = ActorHeader.payload(msg)
        if head is not None and head.version > self.version:
            why = f"weights version {head.version}, ahead of the learner's {self.version}"
        elif head is not None and head.kind == ROLLOUT:
            if head.length != self.codec.numel:
                why = f"a rollout of {head.length} words, not {self.codec.numel}"
            else:
                why = self.codec.problem(payload)
        if head is None or why is not None:
            self._drop(actor, f"it sent {why}")
            return
        if head.signal:  # the actor was interrupted or asked to stop: stop the run
            self.heard = interrupts.merge(self.heard, head.signal)
        kind, part, parts = head.kind, head.part, head.parts
        if kind == ROLLOUT:
            self.pending[actor].append((head.version, head.seconds, payload.clone()))
        elif kind == STATE:
            self.parts[actor].append(payload.clone())
            if part == parts - 1:
                state = from_bytes_payload(torch.cat(self.parts[actor]))
                self.parts[actor] = []
                self.states[(actor, head.iteration)] = state
        elif kind == DONE:
            self.done.add(actor)

    def _drop(self, actor: int, why: str) -> None:
        self.targets.discard(actor)
        if actor not in self.live:
            return
        self.live.discard(actor)
        self.dropped[actor] = f"learner rank {self.rank} dropped it: {why}"
        self.messages.append(
            f"learner rank {self.rank}: dropped actor rank {actor}: {why}; training goes on "
            f"with actors {sorted(self.live)}"
        )
        if not self.live:
            err = PeerFailure(
                f"rank {self.rank}/{self.world_size} (learner): lost every one of its actors "
                f"({self.mine}); nothing left to train on"
            )
            self._abort(err)
            raise err

    def receive_rollouts(self, rollouts: Any) -> None:
        """Learner: one rollout from every live actor into ``rollouts`` (a RemoteRollouts),
        dropping (and counting) rollouts more than K versions old."""
        windows, times, rets = [], [], []
        got: dict[int, tuple[int, float, torch.Tensor]] = {}
        while True:
            for a in sorted(self.live):
                while a not in got and self.pending[a]:
                    version, seconds, payload = self.pending[a].popleft()
                    lag = self.version - version
                    if lag > self.lag_bound:
                        self._acc["dropped"] += self.codec.T * self.codec.N
                        continue
                    got[a] = (version, seconds, payload)
            if set(got) >= self.live:
                break
            self._pump(self.timeout, expecting=self.live - set(got))
        live = sorted(self.live)
        rollouts.resize(len(live))
        for slot, a in enumerate(live):
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
        """Learner: its live actors' states for ``iteration`` (waited for) and its own, gathered
        on rank 0 as a list indexed by rank (a dead actor's entry is empty)."""
        while missing := {a for a in self.live if (a, iteration) not in self.states}:
            self._pump(self.timeout, expecting=missing)
        mine = {self.rank: own} | {a: self.states.pop((a, iteration)) for a in sorted(self.live)}
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
        return {"lags": [], "dropped": 0, "sync_time": 0.0, "sync_bytes": 0, "wait": 0.0}

    def take_metrics(self) -> dict[str, Any]:
        """Learner: this iteration's lag, drops and weight-sync figures (then reset)."""
        acc = self._acc
        lags = acc["lags"]
        out: dict[str, Any] = {
            "dist/policy_lag_mean": sum(lags) / len(lags) if lags else 0.0,
            "dist/policy_lag_max": max(lags) if lags else 0,
            "dist/dropped_samples": acc["dropped"],
            "dist/actors": len(self.live),
            "dist/version": self.version,
            "time/weight_sync": acc["sync_time"],
            "dist/sync_gbps": acc["sync_bytes"] / acc["sync_time"] / 1e9
            if acc["sync_time"] > 0
            else None,
            "dist/rollout_wait": acc["wait"],
        }
        if self.messages:
            out["messages"] = list(self.messages)
            self.messages.clear()
        self._acc = self._fresh()
        return out

    # ---- the end -----------------------------------------------------------------------------
    def finish(self) -> None:
        """Learner: BYE to every actor, then wait for its own actors' DONE. Actor: wait for the
        final weights and every learner's BYE, then DONE."""
        if self.is_learner:
            for a in sorted(self.targets):
                try:
                    self._send(LearnerHeader(BYE, version=self.version, failed=-1).words(), a)
                except RuntimeError as e:
                    self._drop(a, f"sending BYE failed: {_first_line(e)}")
            deadline = time.perf_counter() + self.timeout
            while self.live - self.done and time.perf_counter() < deadline:
                self._pump(deadline - time.perf_counter())
            return
        while self.byes < set(self.learners):
            self._pump_weights(block=True)
        self._up(DONE, torch.zeros(1))

    def release(self) -> list[str]:
        """Learner, after ``finish``: its dropped actors leave (exit 0) instead of holding
        torchrun's agent; a line for each that did not."""
        wait = coordinator_wait(self.timeout) + 5.0
        return [
            f"learner rank {self.rank}: dropped actor rank {r} did not leave"
            for r in release_dropped(self.dropped, wait)
        ]

    def _abort(self, error: BaseException) -> None:
        """Learner: tell every actor which learner failed (best effort) before stopping."""
        who = _stalest(self.learners, self.rank)
        for a in sorted(self.targets):
            with contextlib.suppress(Exception):  # it may be gone too
                self._send(LearnerHeader(ABORT, version=self.version, failed=who).words(), a)
        self.targets.clear()


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _stalest(ranks: list[int], me: int) -> int:
    """The rank among ``ranks`` (not ``me``) whose last heartbeat is oldest; -1 if unknown."""
    ok, beats = store_op(lambda store: heartbeats(store, ranks, me))
    if not ok or not beats:
        return -1
    return min(beats, key=lambda r: beats[r][1])
