"""Task shards, cursors and gradient weights of multi-task RLOO sharding (RIPT; pure arithmetic,
no processes)."""

from __future__ import annotations

import itertools
import json

import pytest

from distrl.algorithms.task_schedule import (
    InitStateCursor,
    TaskCursor,
    TaskSchedule,
    gradient_weights,
    task_at,
    task_shard,
    task_shards,
)

GRID = list(itertools.product([1, 2, 3, 9], [1, 2, 3]))


def test_ript_nine_tasks_on_two_ranks() -> None:
    assert task_shards(9, 2) == [[0, 2, 4, 6, 8], [1, 3, 5, 7]]
    assert task_shard(0, 9, 2) == [0, 2, 4, 6, 8]
    assert task_shard(1, 9, 2) == [1, 3, 5, 7]


def test_ript_six_iterations_in_cursor_order() -> None:
    # current_task = local_tasks[task_cursor % len(local_tasks)]; task_cursor += 1.
    # (The reference write-up's sample printout ends "iteration 6: GPU0 task 8, GPU1 task 7",
    # which that formula does not produce; the formula is the rule, so the shards wrap around.)
    expected = {0: [0, 2, 4, 6, 8, 0], 1: [1, 3, 5, 7, 1, 3]}
    for rank in (0, 1):
        cursor = TaskCursor(task_shard(rank, 9, 2))
        assert [cursor.next() for _ in range(6)] == expected[rank]
        assert [task_at(rank, i, 9, 2) for i in range(6)] == expected[rank]


def test_ript_circular_init_states() -> None:
    # 10 init states, 2 envs x 2 rollouts = 4 per iteration
    cursor = InitStateCursor(10)
    assert cursor.take(4) == [0, 1, 2, 3]
    assert cursor.take(4) == [4, 5, 6, 7]
    assert cursor.take(4) == [8, 9, 0, 1]
    assert cursor.take(23) == [(2 + i) % 10 for i in range(23)]  # wraps more than once


@pytest.mark.parametrize(("num_tasks", "world_size"), GRID)
def test_every_rank_gets_tasks_and_every_task_is_covered(num_tasks: int, world_size: int) -> None:
    shards = task_shards(num_tasks, world_size)
    assert len(shards) == world_size
    assert all(shards), shards  # no rank idles
    covered = sorted({t for s in shards for t in s})
    assert covered == list(range(num_tasks))
    if world_size <= num_tasks:  # a partition: each task on exactly one rank
        assert sorted(t for s in shards for t in s) == list(range(num_tasks))
    else:  # one task per rank, each task on floor or ceil(W / T) ranks
        assert all(len(s) == 1 for s in shards)
        load = [sum(s == [t] for s in shards) for t in range(num_tasks)]
        assert max(load) - min(load) <= 1


def test_more_ranks_than_tasks_no_fallback_to_all_tasks() -> None:
    assert task_shards(1, 3) == [[0], [0], [0]]
    assert task_shards(2, 3) == [[0], [1], [0]]


def test_gradient_weights_disjoint_shards_are_plain_averaging() -> None:
    w = gradient_weights(9, 2, iteration=4)
    assert w.tasks == (8, 1)
    assert w.rank_weights == (0.5, 0.5)
    assert w.task_shares == {8: 0.5, 1: 0.5}
    assert w.loss_scale(0) == 1.0


def test_gradient_weights_shared_task_by_episodes_and_by_tasks() -> None:
    # 2 tasks on 3 ranks: ranks 0 and 2 train task 0, rank 1 trains task 1
    by_eps = gradient_weights(2, 3, iteration=0, episodes=[8, 8, 8])
    assert by_eps.tasks == (0, 1, 0)
    assert by_eps.rank_weights == pytest.approx((1 / 3, 1 / 3, 1 / 3))
    assert by_eps.task_shares == pytest.approx({0: 2 / 3, 1: 1 / 3})
    by_task = gradient_weights(2, 3, iteration=0, episodes=[8, 8, 8], balance="tasks")
    assert by_task.rank_weights == pytest.approx((1 / 4, 1 / 2, 1 / 4))
    assert by_task.task_shares == pytest.approx({0: 1 / 2, 1: 1 / 2})
    assert by_task.loss_scale(1) == pytest.approx(1.5)  # 3 ranks x 1/2


def test_gradient_weights_uneven_episodes_after_dynamic_sampling() -> None:
    # episodes kept: rank 0 -> 6, rank 1 -> 2, rank 2 -> 0 (all its groups dropped)
    by_eps = gradient_weights(2, 3, iteration=7, episodes=[6, 2, 0])
    assert by_eps.rank_weights == pytest.approx((0.75, 0.25, 0.0))
    assert by_eps.task_shares == pytest.approx({0: 0.75, 1: 0.25})
    by_task = gradient_weights(2, 3, iteration=7, episodes=[6, 2, 0], balance="tasks")
    assert by_task.rank_weights == pytest.approx((0.5, 0.5, 0.0))
    # a task with no data at all is not active: the other takes the whole share
    only = gradient_weights(2, 3, iteration=0, episodes=[0, 4, 0], balance="tasks")
    assert only.rank_weights == pytest.approx((0.0, 1.0, 0.0))
    assert only.task_shares == {1: 1.0}
    none = gradient_weights(2, 3, iteration=0, episodes=[0, 0, 0])
    assert none.rank_weights == (0.0, 0.0, 0.0) and none.task_shares == {}


@pytest.mark.parametrize(("num_tasks", "world_size"), GRID)
@pytest.mark.parametrize("balance", ["episodes", "tasks"])
def test_gradient_weights_sum_to_one(num_tasks: int, world_size: int, balance: str) -> None:
    for it in range(6):
        episodes = [4 + (r * 3 + it) % 5 for r in range(world_size)]
        w = gradient_weights(num_tasks, world_size, it, episodes, balance)
        assert sum(w.rank_weights) == pytest.approx(1.0)
        assert sum(w.task_shares.values()) == pytest.approx(1.0)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="at least one task"):
        task_shards(0, 2)
    with pytest.raises(ValueError, match="outside world_size"):
        task_shard(2, 9, 2)
    with pytest.raises(ValueError, match="3 non-negative counts"):
        gradient_weights(2, 3, 0, episodes=[1, 2])
    with pytest.raises(ValueError, match="balance"):
        gradient_weights(2, 3, 0, balance="ranks")
    with pytest.raises(ValueError, match="at least one task"):
        TaskCursor([])
    with pytest.raises(ValueError, match="3 task ids"):
        gradient_weights(2, 3, 0, tasks=[0, 1])


def test_cursor_skips_solved_tasks_and_revisits_them() -> None:
    """Shard [0, 2, 4, 6]: tasks 2 and 6 solved. The cursor passes over them, but a solved task
    comes back once it has waited `revisit` = 6 visits; with every task solved and fresh it
    takes the current one; with nothing solved it is the plain cycle."""
    cursor = TaskCursor([0, 2, 4, 6])
    solved = {2, 6}
    got = [cursor.next(lambda t: t in solved, 6) for _ in range(10)]
    # visits 0-3 are a first pass (never visited counts as waited long enough); 2 comes back
    # at visit 7 (last at 1), 6 at visit 9 (last at 3)
    assert got == [0, 2, 4, 6, 0, 4, 0, 2, 4, 6]
    plain = TaskCursor([0, 2, 4, 6])
    assert [plain.next(lambda t: False, 4) for _ in range(6)] == [0, 2, 4, 6, 0, 2]
    every = TaskCursor([0, 2])
    assert [every.next(lambda t: True, 5) for _ in range(4)] == [0, 2, 0, 2]


def test_cursor_state_keeps_its_visits_and_loads_an_older_one() -> None:
    solved = {0}
    straight = TaskCursor([0, 1, 2])
    expected = [straight.next(lambda t: t in solved, 5) for _ in range(12)]
    first = TaskCursor([0, 1, 2])
    got = [first.next(lambda t: t in solved, 5) for _ in range(7)]
    resumed = TaskCursor([0, 1, 2])
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
    got += [resumed.next(lambda t: t in solved, 5) for _ in range(5)]
    assert got == expected and expected.count(0) < 4  # skipped, identically after the resume
    old = TaskCursor([0, 1, 2])  # a checkpoint written before skipping: shard and position
    old.load_state_dict({"shard": [0, 1, 2], "position": 7})
    assert old.visits == 7 and old.next() == 1


def test_gradient_weights_follow_the_given_tasks() -> None:
    """A schedule that skips solved tasks passes the agreed tasks: two ranks on task 3 split
    its share by tasks, whatever task_at would have said."""
    w = gradient_weights(4, 3, 0, episodes=[2, 2, 4], balance="tasks", tasks=[3, 3, 1])
    assert w.tasks == (3, 3, 1)
    assert w.task_shares == pytest.approx({3: 0.5, 1: 0.5})
    assert w.rank_weights == pytest.approx((0.25, 0.25, 0.5))


def test_schedule_resumes_bitwise_through_json() -> None:
    num_states = {0: 10, 2: 7, 4: 3, 6: 50, 8: 1}
    straight = TaskSchedule(task_shard(0, 9, 2), num_states)
    expected = [straight.next(4) for _ in range(12)]

    first = TaskSchedule(task_shard(0, 9, 2), num_states)
    got = [first.next(4) for _ in range(5)]
    saved = json.loads(json.dumps(first.state_dict()))  # checkpoints may store it as JSON
    resumed = TaskSchedule(task_shard(0, 9, 2), num_states)
    resumed.load_state_dict(saved)
    got += [resumed.next(4) for _ in range(7)]
    assert got == expected
    # each task walks its own list: task 0 is visited at iterations 0, 5, 10
    assert [idx for task, idx in expected if task == 0] == [
        [0, 1, 2, 3],
        [4, 5, 6, 7],
        [8, 9, 0, 1],
    ]


def test_schedule_refuses_a_different_shard() -> None:
    saved = TaskSchedule([0, 2], {0: 5, 2: 5}).state_dict()
    with pytest.raises(ValueError, match="same tasks and number of ranks"):
        TaskSchedule([1, 3], {1: 5, 3: 5}).load_state_dict(saved)
    cursor = InitStateCursor(10)
    with pytest.raises(ValueError, match="init states"):
        cursor.load_state_dict(InitStateCursor(9).state_dict())


def test_resting_init_states_sit_out_their_turns_then_come_back() -> None:
    c = InitStateCursor(6)
    c.smart = True
    assert c.take(2) == [0, 1]
    c.rest([2, 3], 1)  # 2 and 3 came out all equal: they sit out their next turn
    assert c.take(2) == [4, 5]  # the walk passes over them
    assert c.take(2) == [0, 1]
    assert c.take(2) == [2, 3]  # their turn sat out, they are back
    c.rest([4, 5, 0, 1, 2], 2)  # one state free (3), two needed: the plain walk fills in
    assert c.take(2) == [3, 4]
    state = json.loads(json.dumps(c.state_dict()))
    again = InitStateCursor(6)
    again.smart = True
    again.load_state_dict(state)
    assert [again.take(1) for _ in range(4)] == [c.take(1) for _ in range(4)]


def test_a_plain_cursor_keeps_its_old_state() -> None:
    c = InitStateCursor(4)
    c.take(3)
    assert c.state_dict() == {"num_states": 4, "position": 3}
