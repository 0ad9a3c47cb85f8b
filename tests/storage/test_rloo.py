"""RLOO leave-one-out baseline with hand-computed numbers."""

from __future__ import annotations

import pytest
import torch

from distrl.storage.advantages import rloo


def test_single_group_of_three() -> None:
    # A_i = R_i - mean of the others: 1 - (2+3)/2, 2 - (1+3)/2, 3 - (1+2)/2
    out = rloo(torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.float64))
    torch.testing.assert_close(out, torch.tensor([[-1.5, 0.0, 1.5]], dtype=torch.float64))


def test_several_groups() -> None:
    # [4, 0] -> [4 - 0, 0 - 4] ; [1, 1] -> [0, 0]
    out = rloo(torch.tensor([[4.0, 0.0], [1.0, 1.0]]))
    torch.testing.assert_close(out, torch.tensor([[4.0, -4.0], [0.0, 0.0]]))
    # k = 4: [1, 2, 3, 6], total 12, A_i = R_i - (12 - R_i)/3
    #   1 - 11/3 = -8/3 ; 2 - 10/3 = -4/3 ; 3 - 9/3 = 0 ; 6 - 6/3 = 4
    out = rloo(torch.tensor([[1.0, 2.0, 3.0, 6.0]], dtype=torch.float64))
    expected = torch.tensor([[-8 / 3, -4 / 3, 0.0, 4.0]], dtype=torch.float64)
    torch.testing.assert_close(out, expected)
    # k/(k-1) * (R - mean(R)) identity: advantages of a group sum to zero
    assert abs(float(out.sum())) < 1e-12


@pytest.mark.parametrize("k", [0, 1])
def test_k_below_two_raises(k: int) -> None:
    with pytest.raises(ValueError, match="at least 2"):
        rloo(torch.ones(3, k))
