"""Parameter-server strategies (BSP, ASP, BAP after MALib): BSP reproduces allreduce; ASP and
BAP keep their staleness promises, drop what they say they drop, and survive a lost worker; a
lost server stops every worker, named."""

from __future__ import annotations

import pytest
import torch

from distrl.config import PolicyConfig
from tests.distributed.harness import expect_ok, run_ranks
from tests.distributed.workers import equivalence

pytestmark = pytest.mark.timeout(240)

AGENT = dict(norm_adv=True, lr_schedule="adaptive", num_minibatches=4, num_epochs=3)


@pytest.mark.parametrize("reward_norm", [False, True], ids=["raw-rewards", "scaled-rewards"])
def test_bsp_reproduces_allreduce_on_the_same_data(reward_norm: bool):
    agent = dict(AGENT, policy=PolicyConfig(reward_normalization=reward_norm))
    ar = expect_ok(*run_ranks(equivalence, 2, 16, 4, agent, timeout=120)[:2], 2)
    ps = expect_ok(*run_ranks(equivalence, 3, 16, 4, agent, "ps-bsp", timeout=120)[:2], 3)
    server, workers = ps[0], ps[1:]
    for w in workers:  # every worker holds the server's replica
        assert torch.equal(w["params"], server["params"])
        assert torch.equal(w["norm"], server["norm"])
    torch.testing.assert_close(server["params"], ar[0]["params"], atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(server["norm"], ar[0]["norm"], atol=1e-9, rtol=1e-9)
    assert server["lr"] == pytest.approx(ar[0]["lr"], rel=1e-12)
    assert {round(u["lr"], 8) for u in ar[0]["updates"]} != {3e-3}  # the adaptive LR moved
    assert [u["train/updates"] for u in workers[0]["updates"]] == [
        u["train/updates"] for u in ar[0]["updates"]
    ]


def ps(
    tmp_path,
    dist: dict,
    agent: dict,
    fault: dict | None = None,
    timeout: float = 120,
    wait_for: tuple[int, ...] | None = None,
):
    """Run 1 server + 2 workers; returns (results, exit codes)."""
    from tests.distributed.workers import ps_run

    results, codes, _ = run_ranks(
        ps_run, 3, str(tmp_path), dist, agent, fault or {}, timeout=timeout, wait_for=wait_for
    )
    return results, codes


def records(results) -> list[dict]:
    import pickle

    assert results[0][0] == "ok", results[0][1]
    return pickle.loads(results[0][1])["records"]


@pytest.mark.slow
@pytest.mark.parametrize("staleness", [1, 2, 3])
def test_bap_never_lets_a_worker_run_further_ahead_than_its_bound(tmp_path, staleness):
    # Worker 2 is slowed 3x, so worker 1 runs ahead as far as it may: a gradient's staleness
    # (rounds closed since the parameters it was computed with) stays below S.
    dist = dict(strategy="ps-bap", slow_ranks="2:3.0", ps=dict(staleness=staleness, lifetime=30))
    results, codes = ps(tmp_path, dist, dict(max_iterations=4))
    expect_ok(results, codes, 3)
    recs = records(results)
    assert [r["iteration"] for r in recs] == [1, 2, 3, 4]
    assert max(r["dist/staleness_max"] for r in recs) <= staleness - 1
    if staleness > 1:  # it did run ahead
        assert max(r["dist/staleness_max"] for r in recs) >= 1
    assert sum(r["dist/dropped"] for r in recs) == 0


@pytest.mark.slow
def test_bap_closes_a_round_after_its_lifetime_and_counts_the_late_gradients(tmp_path):
    dist = dict(strategy="ps-bap", slow_ranks="2:8.0", ps=dict(staleness=2, lifetime=0.002))
    results, codes = ps(tmp_path, dist, dict(max_iterations=4))
    expect_ok(results, codes, 3)
    recs = records(results)
    assert recs[-1]["iteration"] == 4
    assert sum(r["dist/dropped"] for r in recs) > 0


@pytest.mark.slow
def test_asp_applies_each_gradient_alone_and_workers_never_wait_for_each_other(tmp_path):
    # One update per gradient (version = gradients applied), and with worker 2 much slower,
    # worker 1 finishes its iterations first: the server's record of an iteration counts more
    # env steps than every worker completing it would.
    dist = dict(strategy="ps-asp", slow_ranks="2:40.0")  # env steps are a small share here
    results, codes = ps(tmp_path, dist, dict(max_iterations=4))
    expect_ok(results, codes, 3)
    recs = records(results)
    per_iteration = 2 * 8 * 16  # workers x num_steps x num_envs
    assert recs[-1]["dist/version"] == 2 * 4 * 3 * 4  # workers x iterations x epochs x mbs
    assert any(r["env_steps"] > r["iteration"] * per_iteration for r in recs)
    assert max(r["dist/staleness_max"] for r in recs) >= 1


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["ps-asp", "ps-bap"])
def test_a_dead_worker_is_dropped_by_name_and_training_finishes(tmp_path, mode):
    dist = dict(strategy=mode, timeout=20.0)
    if mode == "ps-bap":
        dist["ps"] = dict(lifetime=2.0)  # only ps-bap reads it
    results, codes = ps(tmp_path, dist, dict(max_iterations=6), dict(kill_worker=(2, 2)))
    assert codes[2] == -9, (codes, results.get(2))
    assert codes[0] == 0 and codes[1] == 0, (codes, results)
    recs = records(results)
    import pickle

    out = pickle.loads(results[0][1])["stdout"]
    assert "dropped worker rank 2" in out, out
    assert recs[-1]["iteration"] == 6 and recs[-1]["dist/workers"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["kill", pytest.param("stop", marks=pytest.mark.long)])
def test_a_lost_server_stops_every_worker_naming_it(tmp_path, fault):
    import json

    timeout = 6.0
    dist = dict(strategy="ps-bsp", timeout=timeout)
    # a worker names a silent server after 2 x timeout + 5 s (the server itself may spend up to
    # the timeout on another, stalled worker first): distributed.param_server.coordinator_wait
    results, codes = ps(
        tmp_path, dist, dict(max_iterations=100_000), dict(server=fault, after=2.0), timeout=45,
        wait_for=(1, 2),  # the stopped server never exits by itself: killed once they have
    )  # fmt: skip
    t_fault = json.loads((tmp_path / "server_fault.json").read_text())["t"]
    for w in (1, 2):
        # exit 1 from the error; the process group is not torn down after a lost peer (that
        # blocked or aborted with the server stopped)
        assert codes[w] == 1, (codes, results.get(w))
        report = json.loads((tmp_path / f"worker{w}_error.json").read_text())
        assert report["type"] == "PeerFailure" and "rank 0" in report["error"], report
        assert report["t"] > t_fault, report  # after the fault (a hang is the harness timeout)


@pytest.mark.slow
def test_bsp_resume_equals_an_uninterrupted_run(tmp_path):
    """Server state (parameters, Adam, LR, normalizer) and every worker's state (envs, RNG,
    shuffle) come back: 2 iterations + resume to 4 equals 4 straight, bit for bit."""
    from tests.helpers import assert_same, final_state

    dist = dict(strategy="ps-bsp")
    full, part = tmp_path / "full", tmp_path / "part"
    for run_dir, agent in (
        (full, dict(max_iterations=4, save_interval=2)),
        (part, dict(max_iterations=2, save_interval=2)),
    ):
        run_dir.mkdir()
        expect_ok(*ps(run_dir, dict(dist), agent), 3)
    from tests.distributed.workers import ps_run

    agent = dict(max_iterations=4, save_interval=2)
    resumed = run_ranks(ps_run, 3, str(part), dict(dist), agent, {}, "auto", timeout=120)
    expect_ok(*resumed[:2], 3)
    a, b = final_state(full, 4), final_state(part, 4)
    assert_same(a["policy"], b["policy"], "policy")
    assert_same(a["ppo"], b["ppo"], "ppo")
