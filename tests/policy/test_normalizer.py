"""Moments (exact merge, flat power sums) and RunningNorm."""

from __future__ import annotations

import torch

from distrl.policy.normalizer import Moments, RunningNorm

F64 = torch.float64


def close(a: torch.Tensor, b: torch.Tensor, tol: float = 1e-10) -> None:
    torch.testing.assert_close(a.to(F64), b.to(F64), rtol=tol, atol=tol)


def test_of_known_batch() -> None:
    # col 0: 1, 2, 3, 6 -> mean 3, deviations -2, -1, 0, 3 -> M2 = 4 + 1 + 0 + 9 = 14
    # col 1 = 10 * col 0 -> mean 30, M2 = 1400
    x = torch.tensor([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0], [6.0, 60.0]])
    m = Moments.of(x)
    assert m.count.dtype == m.mean.dtype == m.m2.dtype == F64
    assert float(m.count) == 4.0
    assert m.mean.tolist() == [3.0, 30.0]
    assert m.m2.tolist() == [14.0, 1400.0]


def test_merge_by_hand() -> None:
    # a = rows [1, 2]: mean 1.5, M2 0.5 ; b = rows [3, 6]: mean 4.5, M2 4.5 ; delta = 3
    # mean = 1.5 + 3 * 2/4 = 3 ; M2 = 0.5 + 4.5 + 9 * 2*2/4 = 14
    a = Moments.of(torch.tensor([[1.0], [2.0]]))
    b = Moments.of(torch.tensor([[3.0], [6.0]]))
    m = a.merge(b)
    assert float(m.count) == 4.0
    assert m.mean.tolist() == [3.0]
    assert m.m2.tolist() == [14.0]


def test_merge_equals_moments_of_concatenation() -> None:
    g = torch.Generator().manual_seed(0)
    a = torch.randn(37, 5, generator=g, dtype=F64) * 3 + 100
    b = torch.randn(11, 5, generator=g, dtype=F64) * 0.5 - 7
    m, ref = Moments.of(a).merge(Moments.of(b)), Moments.of(torch.cat([a, b]))
    close(m.count, ref.count)
    close(m.mean, ref.mean, 1e-12)
    close(m.m2, ref.m2, 1e-12)
    # order does not matter
    m2 = Moments.of(b).merge(Moments.of(a))
    close(m2.mean, ref.mean, 1e-12)
    close(m2.m2, ref.m2, 1e-12)


def test_merge_with_empty() -> None:
    b = Moments.of(torch.tensor([[3.0, 1.0], [6.0, 2.0]]))
    empty = Moments(
        torch.zeros((), dtype=F64), torch.zeros(2, dtype=F64), torch.zeros(2, dtype=F64)
    )
    for m in (empty.merge(b), b.merge(empty)):
        assert float(m.count) == 2.0
        assert torch.equal(m.mean, b.mean) and torch.equal(m.m2, b.m2)
    e = empty.merge(empty)
    assert float(e.count) == 0.0 and not torch.isnan(e.mean).any()


def test_flat_power_sums_over_chunks() -> None:
    # three "ranks" with different sizes: sum of to_flat -> from_flat_sum == moments of the cat
    g = torch.Generator().manual_seed(1)
    chunks = [torch.randn(n, 4, generator=g) * 2 + 5 for n in (3, 17, 8)]
    flat = sum(Moments.of(c).to_flat() for c in chunks)
    assert flat.shape == (1 + 2 * 4,) and flat.dtype == F64
    m = Moments.from_flat_sum(flat)
    ref = Moments.of(torch.cat(chunks))
    assert float(m.count) == 28.0
    close(m.mean, ref.mean, 1e-12)
    close(m.m2, ref.m2, 1e-9)


def test_to_flat_layout() -> None:
    # [count, count*mean, M2 + count*mean^2] = [n, sum x, sum x^2]; x = 1, 2, 3, 6
    m = Moments.of(torch.tensor([[1.0], [2.0], [3.0], [6.0]]))
    assert m.to_flat().tolist() == [4.0, 12.0, 50.0]


def test_running_norm_normalizes() -> None:
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4096, 3, generator=g) * torch.tensor([5.0, 0.1, 2.0]) + torch.tensor(
        [10.0, -3.0, 0.0]
    )
    norm = RunningNorm(3)
    norm.update(Moments.of(x))
    y = norm(x)
    assert y.dtype == torch.float32
    close(y.mean(0), torch.zeros(3), 1e-4)
    close(y.var(0, unbiased=False), torch.ones(3), 1e-4)


def test_running_norm_two_updates_equal_one() -> None:
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(100, 2, generator=g), torch.randn(50, 2, generator=g) * 3 + 1
    n1, n2 = RunningNorm(2), RunningNorm(2)
    n1.update(Moments.of(a))
    n1.update(Moments.of(b))
    n2.update(Moments.of(torch.cat([a, b])))
    assert float(n1.count) == float(n2.count) == 150.0
    close(n1.mean64, n2.mean64, 1e-12)
    close(n1.m2, n2.m2, 1e-12)
    close(n1.inv_std, n2.inv_std, 1e-6)


def test_running_norm_clips() -> None:
    norm = RunningNorm(1, clip=5.0)
    norm.update(Moments.of(torch.tensor([[-1.0], [1.0]])))  # mean 0, var 1
    y = norm(torch.tensor([[100.0], [-100.0], [0.5]]))
    torch.testing.assert_close(y, torch.tensor([[5.0], [-5.0], [0.5]]), rtol=0, atol=1e-6)


def test_fresh_norm_is_identity() -> None:
    x = torch.randn(7, 3)
    torch.testing.assert_close(RunningNorm(3)(x), x, rtol=0, atol=1e-6)


def test_forward_never_changes_statistics() -> None:
    norm = RunningNorm(3)
    norm.update(Moments.of(torch.randn(64, 3) * 2 + 1))
    before = {k: v.clone() for k, v in norm.state_dict().items()}
    for mode in (norm.train, norm.eval):
        mode()
        for _ in range(3):
            norm(torch.randn(32, 3) * 100)
    after = norm.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_forward_does_not_modify_input() -> None:
    norm = RunningNorm(2, clip=1.0)
    x = torch.tensor([[100.0, -100.0]])
    norm(x)
    assert x.tolist() == [[100.0, -100.0]]


def test_disabled_is_identity() -> None:
    norm = RunningNorm(3, enabled=False)
    x = torch.randn(5, 3) * 50
    norm.update(Moments.of(x))  # no-op
    assert norm(x) is x
    assert float(norm.count) == 0.0
    assert torch.equal(norm.mean, torch.zeros(3)) and torch.equal(norm.inv_std, torch.ones(3))


def test_moments_roundtrip_from_module() -> None:
    norm = RunningNorm(2)
    x = torch.randn(20, 2, dtype=F64)
    norm.update(Moments.of(x))
    m = norm.moments()
    ref = Moments.of(x)
    close(m.mean, ref.mean, 1e-12)
    close(m.m2, ref.m2, 1e-12)
    m.mean.add_(1.0)  # a copy: the module is unaffected
    close(norm.mean64, ref.mean, 1e-12)
