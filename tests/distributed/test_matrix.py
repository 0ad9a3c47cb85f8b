"""Every algorithm under every strategy, through the real launcher (`distrl train --nproc N`,
torchrun, Gloo ranks), with the task's default settings: each pair trains to its target, and a
pair that cannot work is refused before anything starts, naming why.

On-policy PPO: cartpole's episode return mean reaches 475 (and the run stops there) within 150
iterations (its default is 100; the asynchronous strategies apply updates in arrival order, so
one run differs from the next: ps-asp first reached 475 at iterations 20 to 96 over thirteen runs;
allreduce at 20 to 47 over seeds 1 to 5).
Multi-task RLOO: reach10's suite success (mean over the ten tasks of each one's latest success)
reaches 0.9 and the run stops early there. Each run is a fresh launcher with a hard timeout.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from tests.distributed.workers import run_cli
from tests.helpers import BIN

pytestmark = pytest.mark.slow

STRATEGIES = {
    "allreduce": ["--nproc", "2"],
    "elastic": ["--nproc", "2", "--dist.strategy", "elastic"],
    "ps-bsp": ["--nproc", "3", "--dist.strategy", "ps-bsp"],
    "ps-asp": ["--nproc", "3", "--dist.strategy", "ps-asp"],
    "ps-bap": ["--nproc", "3", "--dist.strategy", "ps-bap"],
    "learner-actor": ["--nproc", "2", "--dist.strategy", "learner-actor"],
    "learner-actor-async": ["--nproc", "2", "--dist.strategy", "learner-actor", "--dist.sync"]
    + ["async"],
}
QUIET = ["--threads", "1", "--progress", "False", "--tensorboard", "False"]
SMALL_NETS = ["--policy.actor-hidden", "64", "64", "--policy.critic-hidden", "64", "64"]
"""The off-policy learning runs on 64 x 64 networks, not their defaults' 256 x 256: a sixteenth
of the update's arithmetic, which bounds these runs (one took 3.5 minutes at 256 x 256)."""


def train(tmp_path: Path, task: str, flags: list[str]) -> tuple[list[dict], str]:
    run = tmp_path / "run"
    cmd = [str(BIN / "distrl"), "train", task, *flags, *QUIET, "--run-dir", str(run)]
    code, out, err, _ = run_cli(cmd, timeout=240, cwd=tmp_path)
    assert code == 0, out[-3000:] + err[-3000:]
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert (run / "checkpoints").is_dir() and any((run / "checkpoints").glob("ckpt_*.pt"))
    return records, out


def evaluations(records: list[dict], label: str) -> list[float]:
    """The greedy policy's evaluation returns of a run, printed (pytest -s shows them)."""
    evals = [r["eval/return_mean"] for r in records if "eval/return_mean" in r]
    print(f"{label}: evaluations", evals)
    return evals


# Only allreduce runs in make test, to keep it near 10 minutes; the others run in make test-long
# (CI): ps-bsp makes the same updates as allreduce (tests/distributed/test_same_seed.py), the
# parameter server's and learner-actor's own tests stay in make test, and elastic's run under
# --nproc 4 (tests/reliability/test_elastic.py)
LONG_CARTPOLE = ("ps-bsp", "ps-bap", "learner-actor-async", "elastic", "ps-asp", "learner-actor")
# Pixels, memory and many tasks run under one strategy per message path: ps-bsp makes
# allreduce's updates (tests/distributed/test_same_seed.py), ps-bap sends ps-asp's messages and
# async learner-actor sync learner-actor's, each under its own flag in the cartpole row above.
# Populations run under allreduce (each member is a whole launch of its own, its strategy
# inside it). CI's 90 minutes hold no more on 2 cores: a 2-rank launch alone is ~13 s there,
# three imports of torch in a row.
PATHS = ("allreduce", "elastic", "ps-asp", "learner-actor")


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "strategy",
    [
        pytest.param(s, marks=pytest.mark.long) if s in LONG_CARTPOLE else s
        for s in sorted(STRATEGIES)
    ],
)
def test_on_policy_ppo_solves_cartpole_under(tmp_path, strategy):
    flags = [*STRATEGIES[strategy], "--agent.max-iterations", "150", "--agent.target-return"]
    records, out = train(tmp_path, "cartpole", [*flags, "475"])
    best = max(r["episode_return_mean"] or 0.0 for r in records)
    # Async learner-actor included: its rollouts are up to --dist.max-policy-lag versions old,
    # and V-trace (the default --dist.correction) corrects for that.
    assert best >= 475.0, [r["episode_return_mean"] for r in records]
    assert "target return 475 reached" in out, out[-2000:]


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "strategy",
    ["allreduce", *(pytest.param(s, marks=pytest.mark.long) for s in PATHS[1:])],
)
def test_cnn_ppo_trains_on_minatar_pixels_under(tmp_path, strategy):
    """MinAtar Breakout's uint8 grids through the minatar-cnn: collected, agreed on, shipped
    as bytes (learner-actor) and trained on under every strategy (a few iterations: learning
    to a return is measured in docs/benchmarks.md, not here)."""
    flags = [*STRATEGIES[strategy], "--agent.max-iterations", "4", "--env.num-envs", "16"]
    flags += ["--agent.num-steps", "32", "--agent.num-minibatches", "4"]
    records, _ = train(tmp_path, "minatar-breakout", flags)
    assert records[-1]["iteration"] == 4
    assert all(r["loss/value"] == r["loss/value"] for r in records)  # finite, trained


@pytest.mark.long
@pytest.mark.timeout(300)
@pytest.mark.parametrize("strategy", PATHS)
def test_recurrent_ppo_learns_cartpole_without_velocities_under(tmp_path, strategy):
    """The memory task (an MLP stays near 45: tests/test_learning.py): its LSTM policy learns
    under every strategy, its memory carried by whoever collects and replayed by whoever
    learns (learner-actor ships the rollout's first memory and episode starts).

    Within the task's default 150 iterations, stopping at 150 (--agent.target-return): the
    asynchronous strategies order their updates by arrival, so one run differs from the next;
    ps-asp measured 52 to 321 after 60 iterations over six runs, and 477 to 500 after 100."""
    flags = [*STRATEGIES[strategy], "--agent.target-return", "150"]
    records, out = train(tmp_path, "cartpole-novel", flags)
    best = max(r["episode_return_mean"] or 0.0 for r in records)
    assert best >= 150.0, [r["episode_return_mean"] for r in records]
    assert "target return 150 reached" in out, out[-2000:]


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "strategy",
    [pytest.param(s, marks=pytest.mark.long) for s in ("allreduce", "ps-asp")],
)
def test_multitask_rloo_solves_reach10_under(tmp_path, strategy):
    """The suite's success reaches 0.9 and the run stops on it. Under ps-asp the record after
    the stop can read lower: the server decides the stop on the statistics it has, and the
    workers that were still mid-iteration finish it and report episodes of their own (one
    run here read 0.903, 0.906, then 0.889 in the record of the iteration the workers ended)."""
    flags = [*STRATEGIES[strategy], "--multitask.early-stop-success", "0.9"]
    flags += ["--multitask.early-stop-patience", "2"]
    records, out = train(tmp_path, "reach10", flags)
    best = max(r["success/suite"] or 0.0 for r in records)
    assert best >= 0.9, [r["success/suite"] for r in records]
    assert records[-1]["iteration"] < 300 and "early stop: suite success >= 0.9" in out
    assert records[-1]["stopped"].startswith("early stop: suite success >= 0.9")  # (it stands)


@pytest.mark.long
@pytest.mark.timeout(300)
def test_multitask_rloo_learns_reach10_under_bounded_staleness(tmp_path):
    # Measured: with --dist.ps.staleness 1 ps-bap stops at 0.9 after ~50 iterations, as
    # ps-bsp; with the default staleness 2 (gradients one version stale within the PPO-clip
    # epochs) 2 of 3 runs reached 0.9 within 125 iterations and one plateaued near 0.7.
    flags = [*STRATEGIES["ps-bap"], "--agent.max-iterations", "100"]
    records, _ = train(tmp_path, "reach10", flags)
    best = max(r["success/suite"] or 0.0 for r in records)
    assert best >= 0.5, [r["success/suite"] for r in records]  # untrained: about 0.1


@pytest.mark.timeout(60)
def test_multitask_rloo_under_learner_actor_is_refused_before_anything_starts(tmp_path):
    cmd = [str(BIN / "distrl"), "train", "reach10", *STRATEGIES["learner-actor"], *QUIET]
    code, out, err, _ = run_cli([*cmd, "--run-dir", str(tmp_path / "run")], timeout=50)
    assert code == 2, out + err
    assert (
        "reach10 trains with episodic RLOO, which --dist.strategy learner-actor cannot run" in err
    )
    assert "Traceback" not in err and not (tmp_path / "run").exists()


@pytest.fixture(scope="module")
def reach10_clone(tmp_path_factory) -> Path:
    """A behaviour clone of reach10 from 1 demonstration per task (held-out success ~0.7)."""
    d = tmp_path_factory.mktemp("clone")
    for cmd in (["demos", "reach10", "--per-task", "1", "--out", str(d / "d1.pt")],
                ["pretrain", "reach10", "--demos", str(d / "d1.pt"), "--run-dir", str(d / "bc"),
                 "--eval-episodes", "0"]):  # fmt: skip
        code, out, err, _ = run_cli([str(BIN / "distrl"), *cmd], timeout=120, cwd=d)
        assert code == 0, out + err
    return d / "bc" / "checkpoints" / "bc.pt"


@pytest.mark.timeout(300)
def test_rloo_fine_tunes_a_clone_under_a_parameter_server(tmp_path, reach10_clone):
    # ps-bsp: deterministic, so the run either stops at 0.9 or never does (under ps-asp the
    # workers' timing decides, and one CI run ended at 0.895: not a check that can be relied on).
    # The workers skip solved tasks: the task each trained reaches the server with the counts.
    flags = [*STRATEGIES["ps-bsp"], "--init-from", str(reach10_clone)]
    flags += ["--multitask.skip-solved", "0.95"]
    flags += ["--multitask.early-stop-success", "0.9", "--multitask.early-stop-patience", "2"]
    records, out = train(tmp_path, "reach10", flags)
    assert "init: policy from" in out
    assert records[-1]["success/suite"] >= 0.9, [r["success/suite"] for r in records]


@pytest.mark.long
@pytest.mark.timeout(300)
def test_rloo_with_the_demonstrations_term_fine_tunes_a_clone_under_torchrun(
    tmp_path, reach10_clone
):
    # --multitask.demos through the launcher: every rank loads the file and adds the clone's
    # loss to its minibatches; the clone still reaches the suite's 0.9, here with pink noise
    # and each rank's own successes kept for the term (self-imitation)
    demos = reach10_clone.parent.parent.parent / "d1.pt"
    flags = [*STRATEGIES["allreduce"], "--init-from", str(reach10_clone)]
    flags += ["--multitask.noise-beta", "1.0", "--multitask.self-imitation", "2000"]
    flags += ["--multitask.demos", str(demos), "--multitask.bc-coef", "0.01"]
    flags += ["--multitask.early-stop-success", "0.9", "--multitask.early-stop-patience", "2"]
    records, out = train(tmp_path, "reach10", flags)
    assert "init: policy from" in out
    assert records[-1]["success/suite"] >= 0.9, [r["success/suite"] for r in records]


# ---- the off-policy learners (--algorithm): allreduce, PQN under elastic, Ape-X --------------


@pytest.mark.long  # ~45 s each: make test keeps to its 10 minutes; CI runs them
@pytest.mark.timeout(300)
@pytest.mark.parametrize("strategy", ["allreduce", "elastic", "learner-actor"])
def test_pqn_solves_cartpole_under(tmp_path, strategy):
    """PQN's defaults on 2 ranks: 2 x 32 envs, each update all-reduced, 245 iterations at
    most (learner-actor: 1 actor of 32 envs, its learner's epochs over its rollout); the run
    stops on the target."""
    flags = [*STRATEGIES[strategy], "--algorithm", "pqn", "--agent.target-return", "475"]
    records, out = train(tmp_path, "cartpole", flags)
    best = max(r["episode_return_mean"] or 0.0 for r in records)
    assert best >= 475.0, [r["episode_return_mean"] for r in records]
    assert "target return 475 reached" in out, out[-2000:]


@pytest.mark.long
@pytest.mark.timeout(600)
def test_dqn_learns_cartpole_on_two_ranks(tmp_path):
    """DQN with 3-step returns and a prioritized replay on 2 ranks: its greedy policy (the
    evaluation's) learns to hold the pole. A random policy scores about 22. One run here read
    163 to 220 over the first 30k env steps, then 441, 472, 500 and 500; the plain DQN of the
    cartpole defaults is less steady (its best read 293 in 60k on this machine, over 400 on
    another), and that is for docs/benchmarks.md to measure over seeds, not for this check."""
    flags = [*STRATEGIES["allreduce"], "--algorithm", "dqn", "--eval.interval", "10", *SMALL_NETS]
    flags += ["--offpolicy.n-step", "3", "--offpolicy.prioritized", "True"]
    flags += ["--agent.total-timesteps", "48000"]
    records, _ = train(tmp_path, "cartpole", flags)
    evals = evaluations(records, "dqn, 2 ranks")
    assert max(evals) >= 300.0, evals


PENDULUM_STEPS = {"sac": 8000, "td3": 12000}
"""Env steps of both ranks together. One run each on 64 x 64: SAC's evaluation read -314 after
3,200 steps per rank and -183 after 4,800, TD3's -577 after 4,800 and -200 after 6,000."""


@pytest.mark.long
@pytest.mark.timeout(600)
@pytest.mark.parametrize("algorithm", ["sac", "td3"])
def test_continuous_learners_swing_pendulum_up_on_two_ranks(tmp_path, algorithm):
    """A random policy scores about -1200 on pendulum, the swing-up about -150 to -200."""
    flags = [*STRATEGIES["allreduce"], "--algorithm", algorithm, "--eval.interval", "25"]
    flags += ["--agent.total-timesteps", str(PENDULUM_STEPS[algorithm]), *SMALL_NETS]
    records, _ = train(tmp_path, "pendulum", flags)
    evals = evaluations(records, f"{algorithm}, 2 ranks")
    assert max(evals) >= -400.0, evals


@pytest.mark.long  # ~2 minutes
@pytest.mark.timeout(600)
def test_ape_x_dqn_balances_cartpole(tmp_path):
    """1 learner + 2 actors streaming n-step rows into a prioritized replay (Ape-X's recipe):
    the greedy policy (the evaluation's) balances the pole within 60k env steps (one run here
    on 64 x 64 read 473 at 25.6k and 500 at every evaluation from 30.7k; at 40k, with the
    schedules that much shorter, another read 412, 174 and 500: too close to keep)."""
    flags = ["--nproc", "3", "--dist.strategy", "learner-actor", "--algorithm", "dqn"]
    flags += ["--offpolicy.n-step", "3", "--offpolicy.prioritized", "True"]
    flags += ["--eval.interval", "10", "--agent.total-timesteps", "60000", *SMALL_NETS]
    records, _ = train(tmp_path, "cartpole", flags)
    evals = evaluations(records, "ape-x dqn")
    assert max(evals) >= 400.0, evals
    assert records[-1]["dist/actors"] == 2


@pytest.mark.long  # ~1 minute
@pytest.mark.timeout(600)
def test_ape_x_sac_swings_pendulum_up(tmp_path):
    flags = ["--nproc", "3", "--dist.strategy", "learner-actor", "--algorithm", "sac"]
    flags += ["--eval.interval", "25", "--agent.total-timesteps", "8000", *SMALL_NETS]
    records, _ = train(tmp_path, "pendulum", flags)
    evals = evaluations(records, "ape-x sac")
    assert max(evals) >= -400.0, evals


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["pendulum", "--algorithm", "sac", *STRATEGIES["ps-asp"]], "target networks"),
        (
            ["cartpole", "--algorithm", "pqn", *STRATEGIES["learner-actor-async"]],
            "drop --dist.sync async",
        ),
        (["cartpole", "--algorithm", "sac", "--nproc", "2"], "continuous actions"),
    ],
)
def test_off_policy_refusals_come_before_anything_starts(tmp_path, argv, message):
    cmd = [str(BIN / "distrl"), "train", *argv, *QUIET, "--run-dir", str(tmp_path / "run")]
    code, out, err, _ = run_cli(cmd, timeout=50)
    assert code == 2, out + err
    assert message in err and "Traceback" not in err and not (tmp_path / "run").exists()


@pytest.mark.long
@pytest.mark.timeout(300)
@pytest.mark.parametrize("strategy", ["allreduce"])
def test_a_population_of_multi_rank_members_exploits_under(tmp_path, strategy):
    """Two members, each its own launcher on 2 ranks; the worse copies the better's
    checkpoint after the first generation and trains on from it."""
    run = tmp_path / "pop"
    cmd = [str(BIN / "distrl"), "train", "cartpole", "--population", "2", *STRATEGIES[strategy]]
    cmd += ["--pbt.interval", "32768", "--agent.max-iterations", "8", *QUIET]  # 4 iterations
    code, out, err, _ = run_cli([*cmd, "--run-dir", str(run)], timeout=280, cwd=tmp_path)
    assert code == 0, out[-3000:] + err[-3000:]
    rows = (run / "pbt.csv").read_text().splitlines()
    assert len(rows) == 1 + 2 * 2 and "copies member" in out
    for k in (0, 1):
        log = (run / f"member_{k}" / "log.txt").read_text()
        assert "world size" in log or "rank(s)" in log, log[-2000:]
        assert (run / f"member_{k}" / "checkpoints" / "ckpt_00000008.pt").is_file()


@pytest.mark.long
@pytest.mark.timeout(300)
@pytest.mark.parametrize("strategy", ["allreduce", "learner-actor"])
def test_connect_four_self_play_beats_random_under(tmp_path, strategy):
    """Self-play on 2 ranks: the greedy policy wins most games against the random player after
    40 iterations (its league and ratings in the records)."""
    flags = [*STRATEGIES[strategy], "--env.num-envs", "128", "--agent.max-iterations", "40"]
    records, _ = train(tmp_path, "connect-four", flags)
    last = records[-1]
    assert last["league/size"] >= 4 and last["selfplay/win_vs_random"] >= 0.7, last


@pytest.mark.timeout(300)
@pytest.mark.skipif(importlib.util.find_spec("mpe2") is None, reason="the multiagent extra")
@pytest.mark.parametrize(
    "strategy",
    [pytest.param(s, marks=pytest.mark.long) for s in ("allreduce", "ps-bsp", "learner-actor")],
)
def test_a_policy_per_agent_group_trains_under(tmp_path, strategy):
    """MPE's speaker and listener, each group its own actor and critic (the task's default
    --policy.mapping per-group), on 2 or 3 ranks: both groups' networks are trained and saved,
    and each agent's return is in the records under allreduce (rank 0 plays there; the
    parameter server and the learner play no episodes)."""
    flags = [*STRATEGIES[strategy], "--env.num-envs", "8", "--agent.max-iterations", "3"]
    records, out = train(tmp_path, "mpe-speaker-listener", flags)
    assert "agents: groups speaker, listener, a policy each" in out, out[-2000:]
    returns = {"agent/speaker_0/return", "agent/listener_0/return"}
    assert returns <= set(records[-1]) or strategy != "allreduce", records[-1]
    assert records[-1]["episode_return_mean"] is not None
    ckpt = sorted((tmp_path / "run" / "checkpoints").glob("ckpt_*.pt"))[-1]
    policy = torch.load(ckpt, weights_only=True)["policy"]
    for net in ("actor", "critic"):  # group 1's network differs from group 0's
        a, b = policy[f"{net}.nets.0.0.weight"], policy[f"{net}.nets.1.0.weight"]
        assert a.shape == b.shape and not torch.equal(a, b)
