"""Ape-X (--dist.strategy learner-actor with dqn, sac, td3), through the real launcher: actors
send the rows they collect, n-step rows included, to their learner's replay; a resume continues
bit for bit, the learner's replay and priorities and every actor's n-step window included; each
actor explores with its own epsilon where --offpolicy.actor-epsilon asks. PQN's actors send
their whole rollouts the same way: one learner and one actor end bit for bit where one process
does."""

from __future__ import annotations

import json

import pytest
import torch

from distrl.telemetry import read_metrics
from tests.distributed.workers import run_cli
from tests.helpers import BIN, assert_same, final_state

pytestmark = pytest.mark.slow

SMALL = ["--env.num-envs", "4", "--agent.num-steps", "16", "--agent.save-interval", "2"]
SMALL += ["--offpolicy.learning-starts", "64", "--offpolicy.updates", "4"]
SMALL += ["--offpolicy.batch-size", "32", "--offpolicy.buffer-size", "4096"]
QUIET = ["--threads", "1", "--progress", "False", "--tensorboard", "False", "--seed", "3"]
APEX = ["--nproc", "3", "--dist.strategy", "learner-actor", "--algorithm", "dqn"]
APEX += ["--offpolicy.n-step", "3", "--offpolicy.prioritized", "True"]
ACTOR_EPS = ("--offpolicy.actor-epsilon", "0.4")


def train(
    tmp_path, name: str, *flags: str, iters: int = 6, task: str = "cartpole", extra=()
) -> str:
    cmd = [str(BIN / "distrl"), "train", *flags, task, *APEX, *SMALL, *QUIET]
    cmd += [*extra, "--agent.max-iterations", str(iters), "--run-dir", str(tmp_path / name)]
    code, out, err, _ = run_cli(cmd, timeout=200, cwd=tmp_path)
    assert code == 0, out[-3000:] + err[-3000:]
    return out + err


@pytest.mark.long  # 27 s: make test keeps to about 10 minutes; CI runs it
@pytest.mark.timeout(400)
def test_ape_x_fills_the_learners_replay_and_resumes_bit_for_bit(tmp_path):
    said = train(tmp_path, "full")
    assert "per learner" in said  # the replay's memory line
    records = read_metrics(tmp_path / "full")
    last = records[-1]
    # one learner's replay holds both actors' rows: 2 actors x 4 envs x (16 x 6 - 2) n-step rows
    assert last["replay/size"] == 2 * 4 * (16 * 6 - 2), last
    assert last["env_steps"] == 2 * 4 * 16 * 6 and last["dist/actors"] == 2
    assert sum(r["train/updates"] for r in records) > 0
    train(tmp_path, "part", extra=("--agent.stop-at", "2"))  # the schedules run to 6
    train(tmp_path, "part", extra=("--resume", "auto"))
    a, b = final_state(tmp_path / "full", 6, 3), final_state(tmp_path / "part", 6, 3)
    assert "replay" in a["ranks"][0] and "nstep" in a["ranks"][1], list(a["ranks"][0])
    assert_same(a, b)


@pytest.mark.long  # ~12 s: make test keeps to about 10 minutes
@pytest.mark.timeout(120)
def test_each_actor_explores_with_its_own_epsilon(tmp_path):
    """Ape-X's epsilon_i = 0.4^(1 + 7 i / (A - 1)): actor 0 explores at 0.4, actor 1 at 0.4^8;
    the actors' records are on their own ranks, so a hook on each writes what it used."""
    flags = ["--import", "tests.fixtures.epsilons"]
    train(tmp_path, "eps", *flags, iters=4, task="epsilons-cartpole", extra=ACTOR_EPS)
    seen = {
        int(p.stem.split("_")[1]): json.loads(p.read_text())
        for p in (tmp_path / "eps").glob("epsilon_*.json")
    }
    assert seen.keys() == {1, 2}, seen
    assert seen[1][-1] == pytest.approx(0.4) and seen[2][-1] == pytest.approx(0.4**8)


@pytest.mark.long  # two runs each, ~13 s
@pytest.mark.timeout(200)
@pytest.mark.parametrize("limit", [None, 20], ids=["no-time-limit", "truncations"])
def test_pqn_on_one_learner_and_one_actor_ends_where_one_process_does(tmp_path, limit):
    """The actor's rollout reaches the learner as rows with their truncation flags, and the
    learner's Q(lambda) returns from them are the single process's: bit for bit, and to float
    rounding where a 20-step time limit truncates episodes (one process takes max_a Q of a
    final observation over its step's N rows, the learner over the rollout's T x N)."""
    runs = {}
    for name, dist in (("one", []), ("la", ["--nproc", "2", "--dist.strategy", "learner-actor"])):
        cmd = [str(BIN / "distrl"), "train", "cartpole", "--algorithm", "pqn", *dist, *QUIET]
        cmd += ["--env.num-envs", "8", "--agent.num-steps", "16", "--agent.max-iterations", "6"]
        cmd += ["--env.max-episode-steps", str(limit)] if limit else []
        code, out, err, _ = run_cli([*cmd, "--run-dir", str(tmp_path / name)], timeout=150)
        assert code == 0, out[-3000:] + err[-3000:]
        runs[name] = final_state(tmp_path / name, 6)["policy"]
    if limit is None:
        assert_same(runs["one"], runs["la"], "policy")
    for key, value in runs["one"].items():
        torch.testing.assert_close(runs["la"][key], value, rtol=0, atol=1e-6, msg=key)


@pytest.mark.timeout(60)
def test_pqn_under_learner_actor_with_stale_rollouts_is_refused_naming_why(tmp_path):
    cmd = [str(BIN / "distrl"), "train", "cartpole", "--algorithm", "pqn", "--nproc", "2"]
    cmd += ["--dist.strategy", "learner-actor", "--dist.sync", "async", *QUIET]
    code, out, err, _ = run_cli([*cmd, "--run-dir", str(tmp_path / "run")], timeout=50)
    assert code == 2 and "drop --dist.sync async" in err, out + err
