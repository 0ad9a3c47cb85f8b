"""A rank's training state as one value, in the spirit of PureJaxRL's ``runner_state``.

Everything a run needs to go on from where it is: what every replica of the run holds alike
(``replica``: the policy's weights and normalizer buffers, the algorithm's state: optimizer, LR,
its own normalizers and counters, the iteration and the env-step count) and what is this rank's
own (``rank``: its envs and their random streams, its minibatch shuffle, its cursors, a recurrent
policy's memory). ``Runner.training_state`` makes it and ``Runner.load_training_state`` takes it
in, and every path that moves a rank's state goes through those two:

- a checkpoint is ``replica`` with the wall time and every rank's ``rank`` part
  (``to_checkpoint``; ``from_checkpoint`` reads one rank's back);
- elastic's live sync broadcasts ``replica`` (with the newest ``record``) from the member
  holding the newest iteration, and rolls a failed iteration back to a ``copy`` of it;
- learner-actor's actors and a parameter server's workers send their ``rank`` part to the
  rank that writes the checkpoint.

A leaf module (torch only): the runner makes the value and the strategies move it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class TrainingState:
    replica: dict[str, Any]
    """Alike on every replica: ``policy``, the algorithm's keys, ``iteration``, ``env_steps``."""
    rank: dict[str, Any] = field(default_factory=dict)
    """This rank's own (``Runner.rank_state``); empty where it is not carried."""
    record: dict[str, Any] | None = None
    """The newest iteration's metrics record (as logged: it no longer changes)."""

    @property
    def iteration(self) -> int:
        return int(self.replica["iteration"])

    def copy(self) -> TrainingState:
        """A copy that later training does not change (tensors cloned: ``copy.deepcopy`` took
        70 ms for cartpole's ~9k parameters and their Adam state, a tenth of an iteration)."""
        return TrainingState(_copy(self.replica), _copy(self.rank), self.record)

    def to_checkpoint(self, wall_time: float, ranks: list[Any] | None) -> dict[str, Any]:
        """The checkpoint's dict: the replica, the wall time and every rank's own part."""
        return {**self.replica, "wall_time": wall_time, "ranks": ranks}

    @classmethod
    def from_checkpoint(cls, state: dict[str, Any], rank: int) -> TrainingState:
        """Rank ``rank``'s state in a checkpoint's dict (an empty ``rank`` part where the
        checkpoint holds none for it: a dropped actor, a slot not in the group)."""
        replica = {k: v for k, v in state.items() if k not in ("wall_time", "ranks")}
        ranks = state.get("ranks") or []
        mine = ranks[rank] if rank < len(ranks) else None
        return cls(replica, mine or {})


def _copy(obj: Any) -> Any:
    if torch.is_tensor(obj):
        return obj.detach().clone()
    if isinstance(obj, dict):
        return {k: _copy(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_copy(v) for v in obj)
    return copy.deepcopy(obj)
