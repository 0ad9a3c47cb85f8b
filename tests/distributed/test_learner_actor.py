"""Learner-actor with the routing-table weight push: one learner + one actor equals one
process; the routing table delivers identical weights; async keeps its policy-lag bound; a dead
actor is dropped by name, a dead learner stops every rank naming it. Real Gloo ranks, hard
timeouts."""

from __future__ import annotations

import pickle

import pytest
import torch

from distrl.storage.rollout_codec import RolloutCodec, merge_windows
from tests.distributed.harness import expect_ok, run_ranks
from tests.distributed.workers import learn_params, ps_run

LA = dict(strategy="learner-actor")


# ---- single process: the message layout ------------------------------------------------------
@pytest.mark.parametrize("images", [False, True], ids=["vectors", "uint8-images"])
@pytest.mark.parametrize("memory", [0, 6], ids=["mlp", "recurrent"])
def test_rollout_codec_round_trip_into_a_slot(images, memory):
    from types import SimpleNamespace

    T, N, D = 3, 2, 5
    g = torch.Generator().manual_seed(0)
    obs_dtype = torch.uint8 if images else torch.float32

    def observations(*shape):
        if images:
            return torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)
        return torch.randn(*shape, generator=g)

    buf = SimpleNamespace(
        obs=observations(T, N, D),
        actions=torch.randint(0, 3, (T, N), generator=g),
        logprobs=torch.randn(T, N, generator=g),
        values=torch.randn(T, N, generator=g),
        rewards=torch.randn(T, N, generator=g),
        terminated=torch.rand(T, N, generator=g) < 0.3,
        truncated=torch.rand(T, N, generator=g) < 0.3,
        final_values=torch.randn(T, N, generator=g),
        starts=torch.rand(T, N, generator=g) < 0.3,
        memory=torch.randn(N, 2, memory // 2, generator=g),
    )
    window = torch.full((100, 3), -1.0)
    window[-1] = torch.tensor([5.0, 5.0, 7.0])
    src = SimpleNamespace(
        buffer=buf,
        obs=observations(N, D),
        memory=torch.randn(N, 2, memory // 2, generator=g),
        window=window,
    )
    codec = RolloutCodec(T, N, D, 1, 3, obs_dtype, memory)
    ret = torch.tensor([4096.0, 123456.789, 9.87654321e6], dtype=torch.float64)  # exact: bytes
    payload = codec.encode(src, ret)
    assert payload.numel() == codec.numel and payload.dtype == torch.float32
    if images:  # one byte per pixel on the wire (four to a float32 word)
        assert codec.fields["obs"][1] == (T * N * D + 3) // 4
    dst_buf = SimpleNamespace(
        **{
            k: torch.zeros(v.shape[0], 2 * N, *v.shape[2:], dtype=v.dtype)
            if k != "memory"
            else torch.zeros(2 * N, *v.shape[1:])
            for k, v in vars(buf).items()
        }
    )
    dst = SimpleNamespace(
        buffer=dst_buf,
        obs=torch.zeros(2 * N, D, dtype=obs_dtype),
        memory=torch.zeros(2 * N, 2, memory // 2),
    )
    got, got_ret = codec.decode_into(payload, dst, slot=1)
    for k, v in vars(buf).items():
        if k == "memory":
            if memory:
                assert torch.equal(dst_buf.memory[N:], v)
            continue
        if k == "starts" and not memory:
            continue
        assert torch.equal(getattr(dst_buf, k)[:, N:], v), k
        assert not getattr(dst_buf, k)[:, :N].any(), k
    assert torch.equal(dst.obs[N:], src.obs) and torch.equal(got, window)
    if memory:
        assert torch.equal(dst.memory[N:], src.memory)
    assert got_ret.dtype == torch.float64 and torch.equal(got_ret, ret)


def test_merge_windows_keeps_the_newest_episodes():
    a, b = torch.full((100, 3), -1.0), torch.full((100, 3), -1.0)
    a[-2:] = torch.tensor([[1.0, 1.0, 3.0], [2.0, 2.0, 9.0]])
    b[-1:] = torch.tensor([[3.0, 3.0, 5.0]])
    m = merge_windows([a, b])
    assert m.shape == (100, 3)
    assert m[-3:, 2].tolist() == [3.0, 5.0, 9.0] and (m[:-3, 2] == -1).all()
    full = torch.stack([torch.arange(100.0)] * 3, 1)
    assert merge_windows([full, full])[:, 2].min() == 50.0


# ---- real ranks --------------------------------------------------------------------------------
@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    "policy",
    [{}, {"reward_normalization": True}, {"popart_tasks": 2}],
    ids=["raw", "scaled", "popart"],
)
def test_one_learner_one_actor_reproduces_one_process(policy):
    """Also with reward scaling: the actor scales with the statistics that came with the
    weights, and ships its discounted-return moments with the rollout. And with PopArt (two
    tagged tasks, rewards 1x and 10x): the actor's values come from the rescaled output layer
    and the statistics that came with the weights."""
    one = expect_ok(*run_ranks(learn_params, 1, 4, None, policy, timeout=120)[:2], 1)[0]
    la = expect_ok(*run_ranks(learn_params, 2, 4, LA, policy, timeout=120)[:2], 2)
    learner, actor = la
    assert learner["iteration"] == actor["iteration"] == one["iteration"] == 4
    torch.testing.assert_close(learner["params"], one["params"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(learner["buffers"], one["buffers"], atol=1e-5, rtol=1e-5)
    assert learner["lr"] == pytest.approx(one["lr"], rel=1e-5)
    # the actor holds the learner's final weights and normalizer, exactly
    assert torch.equal(actor["params"], learner["params"])
    assert torch.equal(actor["buffers"], learner["buffers"])
    assert learner["records"]["env_steps"] == one["records"]["env_steps"]


def run(tmp_path, world: int, dist: dict, agent: dict, fault: dict | None = None):
    results, codes, _ = run_ranks(
        ps_run, world, str(tmp_path), dict(dist), agent, fault or {}, timeout=150
    )
    return results, codes


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_two_learners_two_actors_train_agree_and_checkpoint(tmp_path):
    from tests.helpers import final_state

    results, codes = run(tmp_path, 4, dict(LA, learners=2), dict(max_iterations=3))
    out = expect_ok(results, codes, 4)
    recs = out[0]["records"]
    assert [r["iteration"] for r in recs] == [1, 2, 3]
    assert all(r["dist/actors"] == 1 and r["dist/policy_lag_max"] == 0 for r in recs)
    assert all(r["time/weight_sync"] > 0 and r["dist/sync_gbps"] > 0 for r in recs)
    assert recs[-1]["env_steps"] == 3 * 2 * 8 * 16
    assert out[2]["version"] == out[3]["version"] == 3
    state = final_state(tmp_path, 3, world_size=4)
    assert len(state["ranks"]) == 4
    for a in (2, 3):  # each actor's env state and RNG are in the checkpoint
        assert {"env", "rng", "obs", "window"} <= set(state["ranks"][a])


@pytest.mark.slow
@pytest.mark.timeout(200)
@pytest.mark.parametrize("lag", [0, 2])
def test_async_actors_never_exceed_the_policy_lag_bound(tmp_path, lag):
    # one learner, two actors; the learner's update is much slower than a 8-step rollout, so
    # the actors run ahead as far as K lets them
    dist = dict(LA, sync="async", max_policy_lag=lag)
    results, codes = run(tmp_path, 3, dist, dict(max_iterations=6, num_epochs=8))
    out = expect_ok(results, codes, 3)
    recs = out[0]["records"]
    assert [r["iteration"] for r in recs] == list(range(1, 7))
    assert max(r["dist/policy_lag_max"] for r in recs) <= lag
    if lag:
        assert max(r["dist/policy_lag_max"] for r in recs) >= 1  # they did run ahead
    assert sum(r["dist/dropped_samples"] for r in recs) == 0  # the actors held back instead


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_dead_actor_is_dropped_by_name_and_training_goes_on(tmp_path):
    results, codes = run(tmp_path, 3, LA, dict(max_iterations=6), dict(kill_after=(2, 2)))
    assert codes[2] != 0  # killed
    assert codes[0] == 0 and codes[1] == 0, results
    out = pickle.loads(results[0][1])
    recs = out["records"]
    assert recs[-1]["iteration"] == 6
    assert recs[0]["dist/actors"] == 2 and recs[-1]["dist/actors"] == 1
    assert "dropped actor rank 2" in out["stdout"]


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_dead_learner_stops_every_rank_naming_it(tmp_path):
    dist = dict(LA, learners=2, timeout=30)
    results, codes = run(tmp_path, 4, dist, dict(max_iterations=50), dict(kill_worker=(1, 2)))
    assert codes[1] != 0
    for r in (0, 2, 3):
        assert codes[r] not in (0, None), f"rank {r} did not stop: {results.get(r)}"
        status, err = results[r]
        assert status == "error"
        assert "rank 1" in err, (r, err)
    for r in (2, 3):
        assert "learner rank 1" in results[r][1], results[r][1]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_resume_equals_an_uninterrupted_run(tmp_path):
    """The learner's state (parameters, Adam, LR, normalizer, shuffle) and each actor's (envs,
    RNG, last observation, episode window) come back: 2 iterations + resume to 4 equals 4
    straight, bit for bit (on-policy is deterministic)."""
    from tests.helpers import assert_same, final_state

    full, part = tmp_path / "full", tmp_path / "part"
    for run_dir, agent in (
        (full, dict(max_iterations=4, save_interval=2)),
        (part, dict(max_iterations=2, save_interval=2)),
    ):
        run_dir.mkdir()
        expect_ok(*run(run_dir, 3, LA, agent), 3)
    agent = dict(max_iterations=4, save_interval=2)
    resumed = run_ranks(ps_run, 3, str(part), dict(LA), agent, {}, "auto", timeout=150)
    expect_ok(*resumed[:2], 3)
    a, b = final_state(full, 4), final_state(part, 4)
    for key in ("policy", "ppo", "ranks", "env_steps"):
        assert_same(a[key], b[key], key)


def test_a_minatar_rollout_costs_its_bytes_on_the_wire():
    """One actor's rollout of MinAtar Breakout at its defaults (64 envs x 128 steps of 4x10x10
    uint8 grids): the frames cross the wire at one byte per cell, 3.3 MB, and everything else
    adds 7 float32 words per step; as float32 values the frames alone would be 13.1 MB."""
    T, N, D = 128, 64, 4 * 10 * 10
    codec = RolloutCodec(T, N, D, 1, 3, torch.uint8)
    wire = codec.numel * 4
    frames = (T + 1) * N * D  # the rollout's observations and the last ones
    per_step_words = 7  # actions, log-probs, values, rewards, terminated, truncated, final V
    assert wire == frames + per_step_words * T * N * 4 + 4 * (6 + 300)
    assert wire < 0.28 * frames * 4  # 3.56 MB against 13.2 MB as float32
