"""Prioritized replay: the sum tree's sums, search and updates against brute force; draws in
proportion to p^alpha (a chi-square bound over 20,000 draws); importance-sampling weights
against their formula; new rows at the largest priority; the priorities in the state, filled
rows only, continuing the same draws after a round trip."""

from __future__ import annotations

import io

import pytest
import torch

from distrl.storage.replay import PrioritizedReplayBuffer, ReplayBuffer
from distrl.storage.sum_tree import SumTree

CPU = torch.device("cpu")


def test_the_sum_tree_sums_finds_and_updates():
    tree = SumTree(5, CPU)  # 8 leaves, 3 levels below the root
    assert tree.leaves == 8 and tree.depth == 3
    tree.set(torch.arange(5), torch.tensor([1.0, 2.0, 3.0, 4.0, 0.5]))
    assert float(tree.total) == 10.5
    # leaf j holds the masses [prefix_j, prefix_j + value_j): 0..1, 1..3, 3..6, 6..10, 10..10.5
    mass = torch.tensor([0.0, 0.99, 1.0, 2.99, 3.0, 5.99, 6.0, 9.99, 10.0, 10.49])
    assert tree.find(mass).tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    tree.set(torch.tensor([1, 4]), torch.tensor([0.0, 7.0]))
    assert float(tree.total) == 15.0
    assert tree.find(torch.tensor([1.5, 8.0, 14.9])).tolist() == [2, 4, 4]
    # every internal node is the sum of its children
    t = tree.tree
    for i in range(1, tree.leaves):
        assert float(t[i]) == float(t[2 * i] + t[2 * i + 1]), i
    # a leaf given twice in one call takes the larger value, whatever the order
    tree.set(torch.tensor([0, 0, 2]), torch.tensor([5.0, 9.0, 1.0]))
    assert tree.values(torch.tensor([0, 2])).tolist() == [9.0, 1.0]
    assert float(tree.total) == 9.0 + 0.0 + 1.0 + 4.0 + 7.0
    rebuilt = SumTree(5, CPU)
    rebuilt.load(tree.values(torch.arange(5)))
    assert torch.equal(rebuilt.tree, tree.tree)  # the tree is a function of its leaves


def replay(capacity: int = 100, alpha: float = 0.6, seed: int = 0) -> PrioritizedReplayBuffer:
    return PrioritizedReplayBuffer(
        capacity, 2, torch.float32, (), torch.long, CPU, seed, alpha=alpha, eps=1e-6
    )


def fill(rb: PrioritizedReplayBuffer, rows: int) -> None:
    for start in range(0, rows, 4):
        n = min(4, rows - start)
        obs = torch.arange(start, start + n, dtype=torch.float32).unsqueeze(1).repeat(1, 2)
        rb.add(obs, torch.arange(start, start + n), torch.zeros(n), obs, torch.zeros(n).bool())


def test_draws_follow_the_priorities_to_the_power_alpha():
    rb = replay(100, alpha=0.6)
    fill(rb, 37)
    td = torch.linspace(0.0, 3.0, 37)  # one row at |TD| 0: only eps keeps it drawable
    rb.update_priorities(torch.arange(37), td)
    p = (td.double() + 1e-6).pow(0.6)
    expected = p / p.sum()
    counts = torch.zeros(37, dtype=torch.float64)
    draws = 0
    for _ in range(80):
        idx = rb.sample(250)["index"]
        assert int(idx.max()) < 37  # never an empty row
        counts += torch.bincount(idx, minlength=37).double()
        draws += 250
    # Pearson's chi-square over the 36 rows expected to be drawn (row 0's share is ~1e-5):
    # 36 - 1 degrees of freedom, mean 35, sd 8.4; stratified draws only lower it
    e = expected[1:] * draws
    chi2 = float(((counts[1:] - e) ** 2 / e).sum())
    assert chi2 < 35 + 6 * 8.4, chi2
    assert counts[0] <= 2


def test_importance_weights_and_new_rows_at_the_largest_priority():
    rb = replay(16, alpha=0.5)
    fill(rb, 8)
    assert torch.equal(rb.tree.values(torch.arange(8)), torch.ones(8, dtype=torch.float64))
    td = torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])
    rb.update_priorities(torch.arange(8), td)
    batch = rb.sample(64, beta=0.4)
    p = (td.double() + 1e-6).pow(0.5)
    prob = p / p.sum()
    w = (8 * prob[batch["index"]]).pow(-0.4)
    torch.testing.assert_close(batch["weights"], (w / w.max()).float())
    assert float(batch["weights"].max()) == 1.0 and batch["weights"].dtype == torch.float32
    assert torch.equal(rb.sample(8, beta=0.0)["weights"], torch.ones(8))
    fill(rb, 4)  # rows 8..11 at the largest p so far: 7 + eps
    leaves = rb.tree.values(torch.arange(8, 12))
    torch.testing.assert_close(leaves, torch.full((4,), (7.0 + 1e-6) ** 0.5, dtype=torch.float64))


def test_the_state_holds_the_filled_rows_priorities_and_draws_the_same_after_loading():
    rb = replay(100_000, alpha=0.6, seed=3)
    fill(rb, 12)
    rb.update_priorities(torch.tensor([0, 5, 5, 11]), torch.tensor([2.0, 0.1, 0.3, 9.0]))
    state = rb.state_dict()
    assert state["priorities"].shape == (12,)
    buf = io.BytesIO()
    torch.save(state, buf)
    assert buf.tell() < 50_000  # 12 rows, not the 100,000 leaves of the tree
    twin = replay(100_000, alpha=0.6, seed=99)
    twin.load_state_dict(state)
    assert torch.equal(twin.tree.tree, rb.tree.tree)
    a, b = rb.sample(32, beta=0.5), twin.sample(32, beta=0.5)
    for k in a:
        assert torch.equal(a[k], b[k]), k
    with pytest.raises(ValueError, match="priority-alpha"):
        replay(100_000, alpha=0.5).load_state_dict(state)
    with pytest.raises(ValueError, match="--offpolicy.prioritized"):
        ReplayBuffer(100_000, 2, torch.float32, (), torch.long, CPU, 0).load_state_dict(state)
    uniform = ReplayBuffer(100_000, 2, torch.float32, (), torch.long, CPU, 0)
    with pytest.raises(ValueError, match="--offpolicy.prioritized"):
        twin.load_state_dict(uniform.state_dict())
    state["priorities"] = state["priorities"][:5]
    with pytest.raises(ValueError, match="truncated"):
        twin.load_state_dict(state)
