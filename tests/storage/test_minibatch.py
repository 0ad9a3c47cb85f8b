"""minibatch_indices: a partition of the flat [T, N] batch, and the ``blocks`` equivalence with
W ranks of N/W envs each shuffling their own batch with an identically seeded generator."""

from __future__ import annotations

import pytest
import torch

from distrl.storage.rollout import RolloutBuffer, minibatch_indices


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize(("T", "N", "M"), [(4, 6, 3), (1, 8, 1), (5, 4, 4), (3, 2, 6)])
def test_blocks1_is_a_partition_into_equal_pieces(T: int, N: int, M: int) -> None:
    mbs = minibatch_indices(T, N, M, gen(0))
    assert len(mbs) == M
    assert all(mb.shape == (T * N // M,) and mb.dtype == torch.long for mb in mbs)
    assert torch.equal(torch.cat(mbs).sort().values, torch.arange(T * N))


def test_blocks1_is_randperm_split() -> None:
    # blocks=1 is exactly one randperm(T*N) from the generator, cut into M consecutive pieces.
    perm = torch.randperm(24, generator=gen(7))
    mbs = minibatch_indices(4, 6, 3, gen(7))
    assert torch.equal(torch.cat(mbs), perm)


def test_shuffles_and_advances_generator() -> None:
    g = gen(1)
    a = torch.cat(minibatch_indices(8, 8, 4, g))
    b = torch.cat(minibatch_indices(8, 8, 4, g))
    assert not torch.equal(a, torch.arange(64))  # actually shuffled (1/64! chance to fail)
    assert not torch.equal(a, b)  # a second epoch draws a fresh permutation


def rank_view(T: int, N: int, W: int, r: int, M: int, g: torch.Generator) -> list[torch.Tensor]:
    """Minibatches rank r (holding envs [r*N/W, (r+1)*N/W)) forms on its own [T, N/W] batch,
    mapped to flat indices t*N + n of the global [T, N] layout."""
    nb = N // W
    out = []
    for local in minibatch_indices(T, nb, M, g):  # local flat index t*nb + n
        t, n = local // nb, local % nb
        out.append(t * N + r * nb + n)
    return out


CASES = [
    # (T, N, M, W)
    (4, 8, 2, 2),
    (4, 8, 4, 2),
    (3, 6, 3, 3),
    (5, 12, 5, 4),
    (2, 16, 1, 2),
    (8, 4, 8, 4),  # one env per rank
    (6, 10, 3, 5),
]


@pytest.mark.parametrize(("T", "N", "M", "W"), CASES)
@pytest.mark.parametrize("seed", [0, 123])
def test_blocks_equals_union_of_ranks(T: int, N: int, M: int, W: int, seed: int) -> None:
    g_global = gen(seed)
    g_ranks = [gen(seed) for _ in range(W)]  # identically seeded generator on every rank
    for _epoch in range(3):  # generators must stay in step across epochs
        glob = minibatch_indices(T, N, M, g_global, blocks=W)
        per_rank = [rank_view(T, N, W, r, M, g_ranks[r]) for r in range(W)]
        assert len(glob) == M
        seen = []
        for j in range(M):
            union = torch.cat([per_rank[r][j] for r in range(W)])
            assert glob[j].numel() == union.numel() == T * N // M
            assert torch.equal(glob[j].sort().values, union.sort().values)
            # and exactly the rank-ordered concatenation (block 0's slice, block 1's, ...)
            assert torch.equal(glob[j], union)
            seen.append(glob[j])
        assert torch.equal(torch.cat(seen).sort().values, torch.arange(T * N))


def test_blocks_pick_the_same_positions_in_every_block() -> None:
    # With blocks=2, each minibatch holds (t, n) and (t, n + N/2) together.
    T, N = 4, 8
    for mb in minibatch_indices(T, N, 4, gen(3), blocks=2):
        t, n = mb // N, mb % N
        half = mb.numel() // 2
        assert torch.equal(t[:half], t[half:])
        assert torch.equal(n[:half] + N // 2, n[half:])
        assert bool((n[:half] < N // 2).all())


def test_blocks_must_divide_envs() -> None:
    with pytest.raises(ValueError, match="equal blocks"):
        minibatch_indices(4, 6, 2, gen(0), blocks=4)


def test_buffer_flat_layout_matches_t_times_n_plus_n() -> None:
    T, N = 3, 4
    buf = RolloutBuffer(T, N, 2, (), True, torch.device("cpu"))
    buf.values.copy_(torch.arange(T * N, dtype=torch.float32).view(T, N))
    buf.obs[2, 1] = torch.tensor([5.0, 6.0])
    flat = buf.flat()
    assert len(flat) == T * N
    assert flat.actions.shape == (T * N,) and flat.actions.dtype == torch.long
    for t in range(T):
        for n in range(N):
            assert float(flat.values[t * N + n]) == t * N + n
    assert torch.equal(flat.obs[2 * N + 1], torch.tensor([5.0, 6.0]))
    # flat() is a view: writes go through to the buffer
    flat.advantages[5] = 7.0
    assert float(buf.advantages[1, 1]) == 7.0
    mb = flat.index(torch.tensor([0, 9]))
    assert torch.equal(mb.values, torch.tensor([0.0, 9.0]))
    cont = RolloutBuffer(T, N, 2, (3,), False, torch.device("cpu"))
    assert cont.flat().actions.shape == (T * N, 3)
    assert cont.actions.dtype == torch.float32
