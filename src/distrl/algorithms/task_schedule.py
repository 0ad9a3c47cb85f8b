"""Which rank trains which task, and on which init states: the schedule of multi-task RLOO
sharding (RIPT's multi-task LIBERO training, Tan et al. 2025), as plain arithmetic.

Nothing here communicates: every rank computes the same numbers from (num_tasks, world_size,
iteration), so no counter file or collective is needed to agree on them, and rank 0 can compute
(and checkpoint) any rank's schedule.

Shards. Tasks are dealt round-robin: rank r gets tasks r, r + W, r + 2W, ... (9 tasks on 2 ranks:
rank 0 -> [0, 2, 4, 6, 8], rank 1 -> [1, 3, 5, 7]). With more ranks than tasks no rank idles and
none falls back to "all tasks" (RIPT's bug): rank r takes the single task r % num_tasks, so each
task is trained by floor(W / T) or ceil(W / T) ranks.

Cursors. Each iteration a rank works on one task of its shard, in order (``TaskCursor``:
shard[i % len(shard)] at iteration i, or, skipping solved tasks, the next unsolved one), and
takes that task's next init states circularly (``InitStateCursor``: 10 states, 4 per visit ->
[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1]).
``TaskSchedule`` bundles one task cursor with one init-state cursor per task of the shard.

Gradient weights. With plain gradient averaging every rank counts 1 / W. ``gradient_weights``
gives each rank's weight for one iteration so that either every *episode* counts the same
(``balance="episodes"``, the default: a task trained by two ranks contributes twice the episodes
and so twice the share; with equal episode counts this is plain averaging) or every *task*
active in the iteration counts the same (``balance="tasks"``: ranks sharing a task split its
share by their episodes). Scale the local loss by ``loss_scale(rank)`` before an averaging
all-reduce and the average is the weighted sum.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


def _check(num_tasks: int, world_size: int) -> None:
    if num_tasks < 1:
        raise ValueError(f"need at least one task, got num_tasks={num_tasks}")
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")


def task_shards(num_tasks: int, world_size: int) -> list[list[int]]:
    """Every rank's task ids: round-robin when ranks <= tasks, else rank r -> [r % num_tasks]."""
    _check(num_tasks, world_size)
    if world_size > num_tasks:
        return [[r % num_tasks] for r in range(world_size)]
    return [list(range(r, num_tasks, world_size)) for r in range(world_size)]


def task_shard(rank: int, num_tasks: int, world_size: int) -> list[int]:
    """Rank ``rank``'s task ids (never empty)."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside world_size {world_size}")
    return task_shards(num_tasks, world_size)[rank]


def task_at(rank: int, iteration: int, num_tasks: int, world_size: int) -> int:
    """The task rank ``rank`` trains at ``iteration`` (what its ``TaskCursor`` yields then)."""
    shard = task_shard(rank, num_tasks, world_size)
    return shard[iteration % len(shard)]


@dataclass(frozen=True)
class GradientWeights:
    """One iteration's weighting: rank r trains ``tasks[r]`` and its gradient counts
    ``rank_weights[r]`` (the weights sum to 1, or are all 0 when no rank has data)."""

    tasks: tuple[int, ...]
    rank_weights: tuple[float, ...]
    task_shares: dict[int, float]  # task -> sum of its ranks' weights (active tasks only)

    def loss_scale(self, rank: int) -> float:
        """Factor on rank ``rank``'s loss so that an averaging (sum / W) all-reduce of the
        gradients yields sum_r rank_weights[r] * grad_r."""
        return len(self.rank_weights) * self.rank_weights[rank]


def gradient_weights(
    num_tasks: int,
    world_size: int,
    iteration: int,
    episodes: Sequence[int] | None = None,
    balance: str = "episodes",
    tasks: Sequence[int] | None = None,
) -> GradientWeights:
    """Each rank's gradient weight and each task's share at ``iteration``.

    ``episodes[r]``: the episodes rank r trains on this iteration (default: the same on every
    rank); after dynamic sampling these differ, and every rank must pass the same, globally
    agreed list (all-gathered), or ranks would scale their losses inconsistently. ``tasks[r]``:
    the task rank r trains (default: ``task_at``, the plain cycle; a schedule that skips solved
    tasks passes the agreed list).

    balance="episodes": w_r = n_r / sum_r' n_r'  (every episode counts the same)
    balance="tasks":    w_r = n_r / (|A| * sum_{r' on task(r)} n_r')  (every task in A, the tasks
                        with data this iteration, counts 1 / |A|)
    """
    if balance not in ("episodes", "tasks"):
        raise ValueError(f"balance must be 'episodes' or 'tasks', got {balance!r}")
    counts = [1] * world_size if episodes is None else [int(n) for n in episodes]
    if len(counts) != world_size or min(counts) < 0:
        raise ValueError(f"episodes must give {world_size} non-negative counts, got {episodes}")
    if tasks is None:  # the plain cycle's
        tasks = [task_at(r, iteration, num_tasks, world_size) for r in range(world_size)]
    if len(tasks) != world_size:
        raise ValueError(f"tasks must give {world_size} task ids, got {tasks}")
    ids = tuple(int(t) for t in tasks)
    per_task: dict[int, int] = {}
    for task, n in zip(ids, counts, strict=True):
        per_task[task] = per_task.get(task, 0) + n
    active = {task: n for task, n in per_task.items() if n > 0}
    if not active:
        weights = [0.0] * world_size
    elif balance == "episodes":
        total = sum(counts)
        weights = [n / total for n in counts]
    else:
        pairs = zip(ids, counts, strict=True)
        weights = [n / (len(active) * active[t]) if n else 0.0 for t, n in pairs]
    shares: dict[int, float] = {}
    for task, w in zip(ids, weights, strict=True):
        if task in active:
            shares[task] = shares.get(task, 0.0) + w
    return GradientWeights(ids, tuple(weights), shares)


class TaskCursor:
    """Cycles through a rank's shard, one task per iteration: shard[position % len(shard)].

    ``next(solved)`` may skip solved tasks: from the current position it takes the first task
    that is not ``solved`` or that this cursor has not given for ``revisit`` iterations; when
    every task is solved and recently visited it takes the current one. Without ``solved`` it
    is the plain cycle."""

    def __init__(self, shard: Sequence[int]) -> None:
        if not shard:
            raise ValueError("a rank's shard must hold at least one task")
        self.shard = [int(t) for t in shard]
        self.position = 0
        self.visits = 0  # next() calls so far
        self.last: dict[int, int] = {}  # task -> the visit that last gave it

    def current(self) -> int:
        """The task of the current iteration (does not advance)."""
        return self.shard[self.position % len(self.shard)]

    def next(self, solved: Callable[[int], bool] | None = None, revisit: int = 1) -> int:
        """The task of the current iteration; the cursor then moves past it."""
        step = 0
        if solved is not None:
            for k in range(len(self.shard)):
                task = self.shard[(self.position + k) % len(self.shard)]
                stale = self.visits - self.last.get(task, -revisit) >= revisit
                if stale or not solved(task):
                    step = k
                    break
        self.position += step
        task = self.current()
        self.position += 1
        self.last[task] = self.visits
        self.visits += 1
        return task

    def state_dict(self) -> dict[str, Any]:
        return {
            "shard": list(self.shard),
            "position": self.position,
            "visits": self.visits,
            "last": {str(t): v for t, v in self.last.items()},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if list(state["shard"]) != self.shard:
            raise ValueError(
                f"saved task shard {list(state['shard'])} differs from this rank's {self.shard}; "
                f"resume with the same tasks and number of ranks"
            )
        self.position = int(state["position"])
        # (checkpoints from before skipping existed hold neither: the plain cycle's history)
        self.visits = int(state.get("visits", self.position))
        self.last = {int(t): int(v) for t, v in state.get("last", {}).items()}


class InitStateCursor:
    """Circular indices into one task's init-state list: each ``take(n)`` continues where the
    previous one stopped, wrapping around (10 states, n = 4: [0..3], [4..7], [8, 9, 0, 1]).

    ``rest(states, turns)`` (RIPT's init-state tracking, ``--multitask.smart-init-states``):
    those states sit out their next ``turns`` turns, the walk passing over them; a take that
    finds fewer free states than it needs in a whole round fills up in plain order."""

    def __init__(self, num_states: int, position: int = 0) -> None:
        if num_states < 1:
            raise ValueError(f"a task needs at least one init state, got {num_states}")
        self.num_states = num_states
        self.position = position % num_states
        self.smart = False  # states may rest (``rest``); off: the plain walk, its state as ever
        self.resting: dict[int, int] = {}  # state -> the turns it still sits out

    def take(self, n: int) -> list[int]:
        """The next ``n`` init-state indices (n may exceed num_states: the list wraps)."""
        if n < 0:
            raise ValueError(f"cannot take {n} init states")
        out: list[int] = []
        pos = self.position
        for _ in range(self.num_states if self.resting else 0):  # one round at most
            if len(out) == n:
                break
            state, pos = pos % self.num_states, pos + 1
            if self.resting.get(state, 0) > 0:  # its turn: sat out
                self.resting[state] -= 1
                continue
            out.append(state)
        fill = n - len(out)  # the plain walk: all of a plain take, the rest of a short round
        out += [(pos + i) % self.num_states for i in range(fill)]
        self.position = (pos + fill) % self.num_states
        return out

    def rest(self, states: Sequence[int], turns: int) -> None:
        """``states`` sit out their next ``turns`` turns."""
        for s in states:
            self.resting[int(s) % self.num_states] = turns
        self.resting = {s: t for s, t in self.resting.items() if t > 0}

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"num_states": self.num_states, "position": self.position}
        if self.smart:  # (a plain cursor's state stays what it always was)
            state["resting"] = {str(s): t for s, t in self.resting.items()}
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if int(state["num_states"]) != self.num_states:
            raise ValueError(
                f"saved cursor walks {state['num_states']} init states, this task has "
                f"{self.num_states}"
            )
        self.position = int(state["position"])
        self.resting = {int(s): int(t) for s, t in state.get("resting", {}).items()}


class TaskSchedule:
    """A rank's multi-task schedule: per iteration one task (``TaskCursor``) and that task's
    next init states (its own ``InitStateCursor``, so each task walks its list independently).

    ``num_init_states`` maps task id -> length of its init-state list (a sequence indexed by task
    id works too).
    """

    def __init__(
        self,
        shard: Sequence[int],
        num_init_states: Mapping[int, int] | Sequence[int],
        smart: bool = False,
    ) -> None:
        self.tasks = TaskCursor(shard)
        self.init_states = {t: InitStateCursor(num_init_states[t]) for t in self.tasks.shard}
        for cursor in self.init_states.values():
            cursor.smart = smart

    def next(
        self, num_states: int, solved: Callable[[int], bool] | None = None, revisit: int = 1
    ) -> tuple[int, list[int]]:
        """This iteration's task (``TaskCursor.next``) and its ``num_states`` init-state
        indices; advances both."""
        task = self.tasks.next(solved, revisit)
        return task, self.init_states[task].take(num_states)

    def state_dict(self) -> dict[str, Any]:
        return {
            "tasks": self.tasks.state_dict(),
            "init_states": {t: c.state_dict() for t, c in self.init_states.items()},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.tasks.load_state_dict(state["tasks"])
        saved = {int(t): s for t, s in state["init_states"].items()}  # JSON turns keys to str
        if set(saved) != set(self.init_states):
            raise ValueError(f"saved schedule covers tasks {sorted(saved)}, not {self.tasks.shard}")
        for t, cursor in self.init_states.items():
            cursor.load_state_dict(saved[t])
