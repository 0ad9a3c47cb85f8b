"""W ranks must match one process on the same data: the proof that gradient averaging and the
global statistics (advantage mean/std, normalizer moments, KL for the adaptive LR and early
stopping) are right."""

from __future__ import annotations

import pytest
import torch

from distrl.config import PolicyConfig
from tests.distributed.harness import expect_ok, run_ranks
from tests.distributed.workers import equivalence

pytestmark = pytest.mark.timeout(180)

AGENT = dict(norm_adv=True, lr_schedule="adaptive", num_minibatches=4, num_epochs=3)


@pytest.mark.parametrize(
    "policy",
    [
        {},
        {"reward_normalization": True},
        {"popart_tasks": 2},
        {"recurrent": "lstm", "recurrent_hidden": 8},
    ],
    ids=["raw-rewards", "scaled-rewards", "popart", "recurrent"],
)
def test_two_ranks_match_one_process_on_the_same_data(policy: dict):
    # with reward scaling, "norm" also holds the discounted-return moments merged over ranks;
    # with PopArt the per-task value-target statistics (2 tasks, rewards 1x and 10x), agreed
    # over ranks before the update that rescales the critic's output layer
    # a recurrent policy over 2 iterations: its KL on these random transitions is large enough
    # that by the 4th iteration the adaptive LR's threshold is crossed on one side only by a
    # float-summation-order difference (1e-7), and the runs part (checked: equal up to there)
    agent = dict(AGENT, policy=PolicyConfig(**policy))
    its = 2 if "recurrent" in policy else 4
    single = expect_ok(*run_ranks(equivalence, 1, 16, its, agent, timeout=120)[:2], 1)[0]
    ranks = expect_ok(*run_ranks(equivalence, 2, 16, its, agent, timeout=120)[:2], 2)
    # identical replicas, bit for bit
    assert torch.equal(ranks[0]["params"], ranks[1]["params"])
    assert torch.equal(ranks[0]["norm"], ranks[1]["norm"])
    # and equal to the single process up to float summation order
    torch.testing.assert_close(ranks[0]["params"], single["params"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ranks[0]["norm"], single["norm"], atol=1e-6, rtol=1e-6)
    if "popart_tasks" in policy:  # (norm ends with PopArt's m1, m2 of the two tasks)
        m1 = ranks[0]["norm"][-4:-2]
        assert m1[1] > 5 * m1[0] > 0  # task 1's targets are ~10x task 0's
    # the adaptive LR moved, and identically
    assert ranks[0]["lr"] == ranks[1]["lr"]
    assert ranks[0]["lr"] == pytest.approx(single["lr"])
    assert {round(u["lr"], 8) for u in single["updates"]} != {3e-3}


def test_kl_crossing_on_one_rank_only_stops_every_rank_together():
    # Run once without a target to see each rank's own KL per minibatch ...
    free = expect_ok(*run_ranks(equivalence, 2, 16, 2, AGENT, timeout=120)[:2], 2)
    k0, k1 = (torch.tensor(r["local_kls"]) for r in free)
    glob = (k0 + k1) / 2
    hi, lo = torch.maximum(k0, k1), torch.minimum(k0, k1)
    # ... pick a target that one rank's own KL crosses while the global KL does not.
    cand = [j for j in range(1, len(glob)) if hi[j] > 1.2 * glob[j] and glob[: j + 1].max() < hi[j]]
    assert cand, "the recorded data should give the ranks different KLs"
    j = cand[0]
    target = float((glob[: j + 1].max() + hi[j]) / 2)
    assert lo[j] < target < hi[j]
    agent = dict(AGENT, target_kl=target)
    ranks = expect_ok(*run_ranks(equivalence, 2, 16, 2, agent, timeout=120)[:2], 2)
    assert ranks[0]["updates"] == ranks[1]["updates"]
    assert torch.equal(ranks[0]["params"], ranks[1]["params"])
    single = expect_ok(*run_ranks(equivalence, 1, 16, 2, agent, timeout=120)[:2], 1)[0]
    assert [u["train/updates"] for u in single["updates"]] == [
        u["train/updates"] for u in ranks[0]["updates"]
    ]
    torch.testing.assert_close(ranks[0]["params"], single["params"], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("algorithm", ["dqn"])
def test_two_off_policy_ranks_match_one_process_on_their_minibatches_side_by_side(algorithm):
    """Data-parallel DQN (allreduce: each rank its own replay's minibatch, the gradients
    averaged) equals one process stepping on both ranks' minibatches side by side, its Q-network
    and its target network, over updates that move the target each time (tau 0.005). (SAC and
    TD3 draw their actions' noise from each rank's own generator, so their ranks do not see one
    process's noise: the same averaging, not the same numbers.)"""
    from tests.distributed.offpolicy_workers import off_policy_equivalence

    single = expect_ok(*run_ranks(off_policy_equivalence, 1, algorithm, 6, timeout=120)[:2], 1)
    ranks = expect_ok(*run_ranks(off_policy_equivalence, 2, algorithm, 6, timeout=120)[:2], 2)
    assert ranks[0]["keys"] == single[0]["keys"]
    for k, v in single[0]["module"].items():
        assert torch.equal(ranks[0]["module"][k], ranks[1]["module"][k]), k  # one replica
        torch.testing.assert_close(ranks[0]["module"][k], v, atol=1e-6, rtol=1e-5, msg=k)
    moved = [k for k, v in single[0]["module"].items() if v.is_floating_point()]
    assert moved  # (the module holds the trained and the target weights)
