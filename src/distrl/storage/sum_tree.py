"""A sum tree in one torch tensor: the sampling structure of proportional prioritized replay
(Schaul et al. 2016, "Prioritized Experience Replay", appendix B.2.1).

    tree[1]                  the sum of every leaf
    tree[i]                  tree[2i] + tree[2i+1]
    tree[L + j], j < L       leaf j (L: the capacity rounded up to a power of two)

Why a tree and not a cumulative sum: a batch of B draws from C priorities costs O(B log C) here
(``find`` walks log C levels, each one gather of B nodes), and updating B priorities costs
O(B log C) too (``set`` recomputes the B leaves' ancestors). ``torch.cumsum`` +
``torch.searchsorted`` would redo an O(C) prefix sum for every minibatch: at a 1M-transition
replay and 64 minibatches per iteration, 64M additions per iteration against about 64 x 20
small gathers. Both are vectorised over the batch (no per-sample Python loop, no host sync).

The nodes are float64: an internal node is always recomputed as the sum of its two children
(never adjusted by a difference), so rounding does not accumulate over a run, and the
tree is a function of its leaves alone: ``load`` of saved leaves gives the same tensor,
bit for bit, as the updates that produced them.
"""

from __future__ import annotations

import torch


class SumTree:
    """Leaf values [capacity] with their sums, on one device."""

    def __init__(self, capacity: int, device: torch.device):
        if capacity < 1:
            raise ValueError(f"a sum tree needs capacity >= 1, got {capacity}")
        self.capacity = capacity
        self.depth = (capacity - 1).bit_length()  # levels below the root
        self.leaves = 1 << self.depth
        self.tree = torch.zeros(2 * self.leaves, dtype=torch.float64, device=device)

    @property
    def total(self) -> torch.Tensor:
        """The sum of every leaf (0-dim, on the tree's device: no host sync)."""
        return self.tree[1]

    def values(self, index: torch.Tensor) -> torch.Tensor:
        """The leaves at ``index`` [B]."""
        return self.tree[index + self.leaves]

    def set(self, index: torch.Tensor, values: torch.Tensor) -> None:
        """Set leaves ``index`` [B] to ``values`` [B] and recompute their ancestors. A leaf given
        twice takes the larger value: the same result on every device, whatever the order of
        the writes (a minibatch may draw a row twice)."""
        node = index + self.leaves
        src = values.to(torch.float64)
        self.tree.scatter_reduce_(0, node, src, "amax", include_self=False)
        for _ in range(self.depth):
            node = node // 2  # duplicates write the same sum: order does not matter
            self.tree[node] = self.tree[2 * node] + self.tree[2 * node + 1]

    def load(self, values: torch.Tensor) -> None:
        """Leaves 0..len(values)-1 set to ``values``, the others 0, and every internal node
        recomputed from them, level by level (a checkpoint's leaves)."""
        self.tree.zero_()
        self.tree[self.leaves : self.leaves + values.shape[0]] = values.to(self.tree)
        for level in reversed(range(self.depth)):
            lo, hi = 1 << level, 1 << (level + 1)
            children = self.tree[hi : 2 * hi]
            self.tree[lo:hi] = children[0::2] + children[1::2]

    def find(self, mass: torch.Tensor) -> torch.Tensor:
        """The leaf [B] whose interval [prefix sum, prefix sum + value) holds each ``mass``
        [B] in [0, total): leaf j is found with probability value_j / total when ``mass`` is
        uniform. Walks down: left when the mass lies within the left child's sum, else right
        with the left child's sum taken off."""
        node = torch.ones(mass.shape, dtype=torch.long, device=mass.device)
        mass = mass.to(torch.float64)
        for _ in range(self.depth):
            left = self.tree[2 * node]
            right = mass >= left
            mass = torch.where(right, mass - left, mass)
            node = 2 * node + right.long()
        return node - self.leaves
