"""Learners apart from actors, weights pushed through a routing table:
``--dist.strategy learner-actor --dist.learners L``.

Ranks 0..L-1 learn: they train on their actors' rollouts, with one gradient all-reduce per
minibatch in their own process group (``new_group``), exactly as ``allreduce`` does among all
ranks. Ranks L.. act: they step their environments with the newest weights they hold and send
each rollout to their learner (actor r feeds learner (r - L) % L). New weights reach the actors
through the routing table (distributed/routing.py, LPT): built once from the parameter metadata
on rank 0 and broadcast, then replayed after every update, each learner ``isend``ing its
assigned chunks and each actor receiving, per learner, exactly the chunks the table names.

The sides: a learner (``learner.py``), the coordinator of its actors on the peer layer
(``distributed/peers.py``, shared with the parameter server: raw float32 messages with a header,
no pickling in the hot path, one receiver thread per peer so that waits have deadlines and a
dead peer's closed connection names it, sends with a timeout, a bad message or a silent actor
dropped by name), and an actor (``actor.py``), a peer of every learner. This module holds what
both share: the message kinds, the process groups, the routing table and the set-up.

- actor -> learner: an ``ActorHeader`` (kind, sender, version, iteration, rollout seconds, part,
  parts, length; ``distributed/messages.py``) and its payload, fixed size; the payload is the
  rollout (``storage/rollout_codec.py``: obs, uint8 images as bytes, actions, log-probs, values,
  rewards, terminated, truncated, final values, recurrent memory and episode starts, last obs,
  episode window), or a part of the actor's checkpoint state, or nothing (DONE);
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

from typing import Any

import torch.distributed as dist
from torch import nn

from distrl.algorithms.ppo import GradientLearner
from distrl.config import TrainConfig
from distrl.distributed.collectives import Collectives
from distrl.distributed.context import DistContext
from distrl.distributed.liveness import heartbeats, store_op
from distrl.distributed.routing import RoutingTable, routing_table
from distrl.distributed.transport import pair_groups
from distrl.storage.rollout_codec import RolloutCodec
from distrl.storage.transition_codec import TransitionCodec

# learner -> actor header kinds
WEIGHTS, BYE, ABORT = 1, 2, 3
# actor -> learner kinds
ROLLOUT, STATE, DONE = 1, 2, 3


class LARank(Collectives):
    """What a learner and an actor share: the process groups, who collects, the seeding, and
    the set-up (rank 0's replica everywhere, the routing table, the rollout codec)."""

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
        self.seed_rank = ctx.rank if self.is_learner else ctx.rank - L
        self.lag_bound = cfg.dist.max_policy_lag if cfg.dist.sync == "async" else 0
        # Every rank creates every group, in the same order. Object collectives get a group of
        # their own so they never share connections with the receiver threads' point-to-point.
        self.learner_group = dist.new_group(self.learners)
        self.object_group = dist.new_group(list(range(W)))
        self.pairs = pair_groups(self.learners, self.actors, cfg.dist.timeout)  # point-to-point
        self.version = 0

    @property
    def num_collectors(self) -> int:
        return len(self.actors)

    @property
    def collector_index(self) -> int:
        return -1 if self.is_learner else self.rank - self.L

    @property
    def measures_sync(self) -> bool:
        return False

    def pair(self, peer: int) -> Any:
        """The process group of this rank and ``peer`` (one learner and one actor)."""
        return self.pairs[(self.rank, peer) if self.is_learner else (peer, self.rank)]

    def setup(self, policy: nn.Module, learner: GradientLearner) -> None:
        """Rank 0's replica reaches every rank (one coalesced broadcast); the routing table is
        computed on rank 0 and broadcast; then each side starts its receiver threads
        (``start``)."""
        self.policy, self.ppo = policy, learner
        self.check_install(policy)
        self.broadcast_tensors_(list(policy.parameters()) + list(policy.buffers()))
        numels, self.buffer_words = sync_numels(learner, policy)
        table = routing_table(numels, self.learners, self.actors) if self.is_main else None
        self.table: RoutingTable = self.broadcast_object(table)
        self.sync_numel = sum(numels)
        T, N = self.cfg.agent.num_steps, self.env_rows or self.cfg.env.num_envs
        self.codec: RolloutCodec | TransitionCodec
        if getattr(learner, "transitions", False):  # off-policy: a replay's rows (Ape-X), or
            n_step = getattr(self.cfg.offpolicy, "n_step", 1)  # PQN's whole rollout as rows
            whole = not getattr(learner, "replay", False)  # (then with its truncations)
            own = learner.policy  # type: ignore[attr-defined]
            self.codec = TransitionCodec.for_policy(own, T, N, n_step, truncation=whole)
        else:
            self.codec = RolloutCodec.for_policy(policy, T, N)
        self.capacity = max(self.codec.numel, 4096)
        if self.is_learner and self.cfg.dist.overlap:  # among the learners, as allreduce
            self.overlap_backward(learner, self.cfg.dist.bucket_mb)
        self.start()

    def start(self) -> None:
        raise NotImplementedError


def sync_numels(ppo: GradientLearner, policy: nn.Module) -> tuple[list[int], int]:
    """The weight vector's tensors: every parameter, then the buffers as float64 words."""
    words = 2 * sum(b.numel() for b in policy.buffers())
    return [p.numel() for p in ppo.params] + ([words] if words else []), words


def stalest(ranks: list[int], me: int) -> int:
    """The rank among ``ranks`` (not ``me``) whose last heartbeat is oldest; -1 if unknown."""
    ok, beats = store_op(lambda store: heartbeats(store, ranks, me))
    if not ok or not beats:
        return -1
    return min(beats, key=lambda r: beats[r][1])
