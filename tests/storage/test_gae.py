"""GAE with hand-computed numbers: plain chains, terminated/truncated cuts, bootstrap sources."""

from __future__ import annotations

import torch

from distrl.storage.advantages import gae

GAMMA, LAM = 0.9, 0.8  # gamma * lam = 0.72
F64 = torch.float64

# One column used throughout: rewards r, values V (V(s_t) for t = 0, 1, 2), V(s_3) = 2.0.
R = [1.0, 2.0, 3.0]
V = [0.5, 1.0, 1.5]
LAST = 2.0


def col(xs: list[float]) -> torch.Tensor:
    return torch.tensor(xs, dtype=F64).unsqueeze(1)  # [T, 1]


def run(
    term: list[bool],
    trunc: list[bool],
    final: list[float] | None = None,
    last: float = LAST,
) -> tuple[torch.Tensor, torch.Tensor]:
    final = final if final is not None else [100.0, 100.0, 100.0]  # garbage where not truncated
    return gae(
        col(R),
        col(V),
        torch.tensor(term).unsqueeze(1),
        torch.tensor(trunc).unsqueeze(1),
        col(final),
        torch.tensor([last], dtype=F64),
        GAMMA,
        LAM,
    )


def check(adv: torch.Tensor, expected: list[float]) -> None:
    torch.testing.assert_close(adv, col(expected), rtol=0, atol=1e-12)


NO = [False, False, False]


def test_no_dones() -> None:
    # delta_0 = 1 + 0.9*1.0 - 0.5 = 1.4
    # delta_1 = 2 + 0.9*1.5 - 1.0 = 2.35
    # delta_2 = 3 + 0.9*2.0 - 1.5 = 3.3        (bootstraps from last_values = 2.0)
    # A_2 = 3.3
    # A_1 = 2.35 + 0.72*3.3   = 4.726
    # A_0 = 1.4  + 0.72*4.726 = 4.80272
    adv, ret = run(NO, NO)
    check(adv, [4.80272, 4.726, 3.3])
    # returns = A + V
    check(ret, [5.30272, 5.726, 4.8])


def test_last_step_bootstraps_from_last_values() -> None:
    # last_values = 0: delta_2 = 3 + 0 - 1.5 = 1.5
    # A_1 = 2.35 + 0.72*1.5 = 3.43 ; A_0 = 1.4 + 0.72*3.43 = 3.8696
    adv, _ = run(NO, NO, last=0.0)
    check(adv, [3.8696, 3.43, 1.5])
    # last_values = 10: delta_2 = 3 + 9 - 1.5 = 10.5
    # A_1 = 2.35 + 0.72*10.5 = 9.91 ; A_0 = 1.4 + 0.72*9.91 = 8.5352
    adv, _ = run(NO, NO, last=10.0)
    check(adv, [8.5352, 9.91, 10.5])


def test_terminated_in_the_middle() -> None:
    # terminated at t=1: no bootstrap, chain cut.
    # delta_1 = 2 - 1.0 = 1.0 ; A_1 = 1.0 (A_2 not added)
    # A_2 = 3.3 (unchanged) ; A_0 = 1.4 + 0.72*1.0 = 2.12 (t=0 itself is not done)
    adv, ret = run([False, True, False], NO)
    check(adv, [2.12, 1.0, 3.3])
    check(ret, [2.62, 2.0, 4.8])


def test_truncated_in_the_middle_bootstraps_from_final_value() -> None:
    # truncated at t=1 with V(final_obs) = 10 (values[2] = 1.5 is the reset state: unused here)
    # delta_1 = 2 + 0.9*10 - 1.0 = 10.0 ; A_1 = 10.0 (chain cut, A_2 not added)
    # A_2 = 3.3 ; A_0 = 1.4 + 0.72*10 = 8.6
    adv, ret = run(NO, [False, True, False], final=[100.0, 10.0, 100.0])
    check(adv, [8.6, 10.0, 3.3])
    check(ret, [9.1, 11.0, 4.8])


def test_truncated_last_step_uses_final_not_last_values() -> None:
    # truncated at t=2 with V(final) = 10; last_values = 2.0 is the reset state and is ignored:
    # delta_2 = 3 + 0.9*10 - 1.5 = 10.5 -> same chain as last_values = 10 above.
    adv, _ = run(NO, [False, False, True], final=[100.0, 100.0, 10.0])
    check(adv, [8.5352, 9.91, 10.5])


def test_terminated_last_step_ignores_last_values() -> None:
    # delta_2 = 3 - 1.5 = 1.5 -> same chain as last_values = 0.
    adv, _ = run([False, False, True], NO, last=123.0)
    check(adv, [3.8696, 3.43, 1.5])


def test_terminated_and_truncated_does_not_bootstrap() -> None:
    # Both flags at t=1 (Gymnasium TimeLimit sets truncated even on the terminating step, and
    # the runner fills final_values wherever truncated). A terminated step bootstraps from
    # nothing, so this must equal the terminated-only case [2.12, 1.0, 3.3].
    # Actual: delta_1 = 2 + 0.9*10 - 1 = 10 -> [8.6, 10.0, 3.3].
    adv, _ = run([False, True, False], [False, True, False], final=[100.0, 10.0, 100.0])
    check(adv, [2.12, 1.0, 3.3])


def test_gamma_lambda_one_is_monte_carlo() -> None:
    # gamma = lam = 1, no dones: A_t = sum_{k>=t} r_k + V(s_3) - V(s_t)
    # A_0 = 6 + 2 - 0.5 = 7.5 ; A_1 = 5 + 2 - 1 = 6 ; A_2 = 3 + 2 - 1.5 = 3.5
    adv, ret = gae(
        col(R),
        col(V),
        col([0, 0, 0]).bool(),
        col([0, 0, 0]).bool(),
        col([0, 0, 0]),
        torch.tensor([LAST], dtype=F64),
        1.0,
        1.0,
    )
    check(adv, [7.5, 6.0, 3.5])
    check(ret, [8.0, 7.0, 5.0])


def test_columns_are_independent() -> None:
    # N = 5 columns, same rewards/values, different done patterns / last values:
    #   0: no dones, last 2          -> [4.80272, 4.726, 3.3]
    #   1: terminated at t=1          -> [2.12, 1.0, 3.3]
    #   2: truncated at t=1, final 10 -> [8.6, 10.0, 3.3]
    #   3: terminated at t=2          -> [3.8696, 3.43, 1.5]
    #   4: no dones, last 0           -> [3.8696, 3.43, 1.5]
    N = 5
    rewards = col(R).expand(3, N).clone()
    values = col(V).expand(3, N).clone()
    term = torch.zeros(3, N, dtype=torch.bool)
    trunc = torch.zeros(3, N, dtype=torch.bool)
    term[1, 1] = True
    trunc[1, 2] = True
    term[2, 3] = True
    final = torch.full((3, N), 100.0, dtype=F64)
    final[1, 2] = 10.0
    last = torch.tensor([2.0, 2.0, 2.0, 2.0, 0.0], dtype=F64)
    adv, ret = gae(rewards, values, term, trunc, final, last, GAMMA, LAM)
    expected = torch.tensor(
        [
            [4.80272, 4.726, 3.3],
            [2.12, 1.0, 3.3],
            [8.6, 10.0, 3.3],
            [3.8696, 3.43, 1.5],
            [3.8696, 3.43, 1.5],
        ],
        dtype=F64,
    ).T
    torch.testing.assert_close(adv, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(ret, expected + values, rtol=0, atol=1e-12)
    assert adv.shape == (3, N) and ret.shape == (3, N)


def test_float32_inputs_and_dtype() -> None:
    adv, ret = gae(
        col(R).float(),
        col(V).float(),
        torch.zeros(3, 1, dtype=torch.bool),
        torch.zeros(3, 1, dtype=torch.bool),
        torch.zeros(3, 1),
        torch.tensor([LAST]),
        GAMMA,
        LAM,
    )
    assert adv.dtype == torch.float32 and ret.dtype == torch.float32
    torch.testing.assert_close(adv, col([4.80272, 4.726, 3.3]).float())
