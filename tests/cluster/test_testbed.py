"""Many machines for real: torchrun's multi-node recipe on a testbed of network namespaces
(tests/cluster/testbed.py): each node its own network stack, address and rate-limited link,
the ranks talking over the bridge, never over loopback.

- DD-PPO on 2 nodes x 1 process equals `distrl train --nproc 2` on one node (the session's
  ``two_rank_reference``), bit for bit, with rank i on node i and Gloo on the node's link;
- a node cut off mid-run (its link down at the switch: packets vanish, no reset) makes the other
  rank exit with an error naming the silent rank, after --dist.timeout and not long after;
- a node killed mid-run (its torchrun agent and its worker SIGKILLed) and started again:
  torchrun restarts the surviving node's rank, the run resumes from the newest checkpoint and
  ends bit for bit where the uninterrupted run did;
- ps-asp and ps-bap with one worker's node on a 5 Mbit/s link finish with both workers (slow is
  not dead), and learner-actor's 2 learners on 2 nodes feed 2 actors on 2 more.

Needs root and iproute2 (`ip netns`, `tc`): skipped, with what is missing, elsewhere.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from distrl.telemetry import read_metrics
from tests.cluster import testbed
from tests.cluster.testbed import SUBNET, Testbed
from tests.distributed.workers import cli_env
from tests.fixtures import kill_once
from tests.helpers import BIN, assert_same, final_state
from tests.reliability.conftest import TWO_RANK_ARGS, TWO_RANK_ITERS

WHY = testbed.missing()
pytestmark = pytest.mark.skipif(WHY is not None, reason=f"no namespace testbed: {WHY}")

ITERS = TWO_RANK_ITERS
PORT = 29400  # every node has its own network stack: the port is always free
ENVS = 8  # per rank, in TWO_RANK_ARGS
STEPS = 8


def train_args(run_dir: Path, *extra: str) -> list[str]:
    """What torchrun runs on every node: the reference's `train` flags, plus ``extra``."""
    head = [str(BIN / "train"), "cartpole", "--distributed", "True", "--run-dir", str(run_dir)]
    return [*head, *TWO_RANK_ARGS, *extra]


def start(
    tb: Testbed,
    script: list[str],
    logs: Path,
    nodes: list[int] | None = None,
    max_restarts: int = 0,
    rdzv_conf: str = "",
    **env: str,
) -> list[subprocess.Popen]:
    """torchrun (1 process per node) on ``nodes`` (default all; node 0 first, the rendezvous
    host), output to logs/node<i>.log (appended: a node started again keeps its first log)."""
    logs.mkdir(parents=True, exist_ok=True)
    base = cli_env(TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1", **env)
    procs = []
    for i in range(len(tb.nodes)) if nodes is None else nodes:
        n = tb.nodes[i]
        with (logs / f"node{i}.log").open("a") as log:
            cmd = tb.torchrun(n, 1, PORT, script, max_restarts, rdzv_conf)
            procs.append(tb.popen(n, cmd, env=base, stdout=log, stderr=subprocess.STDOUT))
    return procs


def wait(procs: list[subprocess.Popen], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    return [p.wait(max(0.1, deadline - time.monotonic())) for p in procs]


def logs_of(logs: Path) -> str:
    return "".join(f"--- {p.name}\n{p.read_text()}" for p in sorted(logs.glob("node*.log")))


def rank_envs(tb: Testbed, procs: list[subprocess.Popen]) -> list[dict[str, str]]:
    """Each node's (one) worker environment, read while the run goes on."""
    envs: list[dict[str, str]] = [{} for _ in tb.nodes]
    while not all(envs) and all(p.poll() is None for p in procs):
        envs = [e or next(iter(tb.worker_envs(n)), {}) for e, n in zip(envs, tb.nodes, strict=True)]
        time.sleep(0.02)
    return envs


def iterations(run_dir: Path) -> int:
    """Records in the run's metrics.jsonl so far."""
    return len(read_metrics(run_dir)) if (run_dir / "metrics.jsonl").exists() else 0


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    """The reference's DD-PPO run as 2 nodes x 1 process on 1000 Mbit/s links: its run dir,
    exit codes, logs, and the workers' environments seen mid-run."""
    tmp = tmp_path_factory.mktemp("two_nodes")
    with Testbed(nodes=2, rate_mbit=1000) as tb:
        procs = start(tb, train_args(tmp / "run"), tmp / "logs")
        envs = rank_envs(tb, procs)
        codes = wait(procs, 120)
    return tmp / "run", codes, logs_of(tmp / "logs"), envs


@pytest.mark.slow  # a 2-node launch: ~10 s
@pytest.mark.timeout(150)
def test_two_nodes_equal_one_node_with_two_processes_bitwise(two_nodes, two_rank_reference):
    run_dir, codes, out, _ = two_nodes
    assert codes == [0, 0], out
    a, b = final_state(run_dir, ITERS, world_size=2), final_state(two_rank_reference, ITERS, 2)
    assert_same(a["policy"], b["policy"], "policy")
    assert_same(a, b)  # and the rest: optimizer, LR, env steps, every rank's envs and RNG
    assert out.count("distrl: task cartpole (on-policy PPO) | 2 rank(s) x 8 envs") == 1, (
        out
    )  # rank 0 only


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_rank_i_runs_on_node_i_and_talks_over_the_nodes_links(two_nodes):
    *_, envs = two_nodes
    assert all(envs), f"could not read a worker's environment: {envs}"
    for i, e in enumerate(envs):
        assert (e["RANK"], e["GROUP_RANK"], e["WORLD_SIZE"]) == (str(i), str(i), "2"), e
        assert e["GLOO_SOCKET_IFNAME"] == "eth0", e
        # the workers' store is on node 0's address (torchrun's --local-addr), not the hostname
        assert e["MASTER_ADDR"] == f"{SUBNET}.{testbed.FIRST_HOST}", e["MASTER_ADDR"]


@pytest.mark.slow  # waits out --dist.timeout 10: ~20 s
@pytest.mark.timeout(150)
def test_a_node_cut_off_is_named_within_the_timeout(tmp_path):
    timeout, margin = 10.0, 30.0
    run_dir, logs = tmp_path / "run", tmp_path / "logs"
    script = train_args(run_dir, "--agent.max-iterations", "100000", "--dist.timeout", "10")
    with Testbed(nodes=2, rate_mbit=1000) as tb:
        procs = start(tb, script, logs)
        deadline = time.monotonic() + 90
        while iterations(run_dir) < 3 and time.monotonic() < deadline:
            assert all(p.poll() is None for p in procs), logs_of(logs)
            time.sleep(0.1)
        assert iterations(run_dir) >= 3, "the run did not get going\n" + logs_of(logs)
        tb.set_link(tb.nodes[1], up=False)
        t_cut = time.monotonic()
        try:
            code0 = procs[0].wait(timeout + margin)
        except subprocess.TimeoutExpired:
            pytest.fail(f"node 0 still running {timeout + margin:.0f} s after node 1 was cut off")
        elapsed = time.monotonic() - t_cut
    out = (logs / "node0.log").read_text()
    print(f"node 0 exited {code0} {elapsed:.1f} s after the cut; last lines:\n{out[-1500:]}")
    assert code0 != 0
    assert "rank 1 last seen at iteration" in out, out[-3000:]  # names the silent rank
    assert elapsed >= timeout - 1, f"exited {elapsed:.1f} s after the cut, before the timeout"


@pytest.mark.slow  # a 2-node run, one node killed and started again: ~25 s
@pytest.mark.timeout(150)
def test_a_killed_node_started_again_resumes_bitwise(two_rank_reference, tmp_path):
    run_dir, logs, marker = tmp_path / "run", tmp_path / "logs", tmp_path / "killed"
    # kill-once-cartpole: rank 1 kills its agent, then itself, entering iteration 5's update
    script = kill_once.command(train_args(run_dir, "--resume", "auto"))
    kill = dict(
        DISTRL_TEST_KILL_AT_ITERATION="5",
        DISTRL_TEST_KILL_RANK="1",
        DISTRL_TEST_KILL_AGENT="1",
        DISTRL_TEST_KILL_MARKER=str(marker),
    )
    with Testbed(nodes=2, rate_mbit=1000) as tb:
        # a dead node leaves the rendezvous after 3 missed heartbeats: 3 s here, 15 s by default
        again = dict(max_restarts=1, rdzv_conf="keep_alive_interval=1", **kill)
        node0, node1 = start(tb, script, logs, **again)
        assert node1.wait(90) == -9, logs_of(logs)  # the agent, SIGKILLed by its worker
        assert marker.read_text() == "rank 1 killed at iteration 5\n"
        assert tb.worker_envs(tb.nodes[1]) == [], "a worker outlived its node"
        # the replacement node: the same command (the marker keeps the hook from firing again)
        (node1,) = start(tb, script, logs, nodes=[1], **again)
        codes = wait([node0, node1], 120)
    out = logs_of(logs)
    assert codes == [0, 0], out[-4000:]
    # node 0's rank lost its peer, named it, and was restarted once by its agent ...
    assert "rank 1 last seen at iteration 5" in out and out.count("failed (exitcode") == 1, out
    # ... and both ranks of the new round resumed from the newest checkpoint
    assert f"resume: loaded {run_dir}/checkpoints/ckpt_00000004.pt at iteration 4" in out, out
    assert out.count("distrl run summary") == 1, out
    assert [r["iteration"] for r in read_metrics(run_dir)] == list(range(1, ITERS + 1))
    assert_same(final_state(run_dir, ITERS, 2), final_state(two_rank_reference, ITERS, 2))


@pytest.mark.slow  # 3 nodes, one throttled: ~15 s each
@pytest.mark.timeout(150)
@pytest.mark.parametrize("strategy", ["ps-asp", "ps-bap"])
def test_parameter_server_with_one_worker_throttled_keeps_both_workers(tmp_path, strategy):
    run_dir = tmp_path / "run"
    script = train_args(run_dir, "--dist.strategy", strategy)
    with Testbed(nodes=3, rate_mbit=1000) as tb:
        tb.set_rate(5, nodes=[tb.nodes[2]])  # worker rank 2 on a 5 Mbit/s link
        procs = start(tb, script, tmp_path / "logs")
        codes = wait(procs, 120)
    out = logs_of(tmp_path / "logs")
    assert codes == [0, 0, 0], out[-4000:]
    last = read_metrics(run_dir)[-1]
    assert last["iteration"] == ITERS and last["dist/workers"] == 2, last  # slow is not dead
    assert last["env_steps"] == ITERS * STEPS * ENVS * 2, last  # both workers' steps, all along
    assert "dropped worker" not in out, out[-4000:]


@pytest.mark.slow  # 4 nodes: ~15 s
@pytest.mark.timeout(150)
def test_learner_actor_with_two_learners_on_two_nodes(tmp_path):
    run_dir = tmp_path / "run"
    script = train_args(run_dir, "--dist.strategy", "learner-actor", "--dist.learners", "2")
    with Testbed(nodes=4, rate_mbit=300) as tb:
        procs = start(tb, script, tmp_path / "logs")
        envs = rank_envs(tb, procs)
        codes = wait(procs, 120)
    assert codes == [0, 0, 0, 0], logs_of(tmp_path / "logs")[-4000:]
    assert [e.get("RANK") for e in envs] == ["0", "1", "2", "3"], envs  # learners: nodes 0, 1
    last = read_metrics(run_dir)[-1]
    # learner 0 trains on its one actor's rollouts; env steps count both actors'
    assert last["iteration"] == ITERS and last["dist/actors"] == 1, last
    assert last["env_steps"] == ITERS * STEPS * ENVS * 2, last


def elastic_node_command(run_dir: Path, node: int, *extra: str) -> list[str]:
    """Node ``node``'s elastic command: 2 ranks per node, node 0 hosting the store."""
    return [
        str(BIN / "distrl"), "train", "--import", "tests.fixtures.elastic_faults",
        "elastic-faults-cartpole", "--dist.strategy", "elastic", "--nproc", "2",
        "--nnodes", "2", "--node-rank", str(node), "--master-addr", f"{SUBNET}.101",
        "--master-port", str(PORT), "--dist.timeout", "5", "--run-dir", str(run_dir),
        "--progress", "False", "--tensorboard", "False", *extra,
    ]  # fmt: skip


@pytest.mark.slow  # 2 nodes x 2 ranks, node 1 killed and started again: ~60 s
@pytest.mark.timeout(240)
def test_elastic_goes_on_without_a_killed_node_and_takes_it_back(tmp_path):
    """The elastic promise across machines: node 1 (its launcher and both its ranks) is
    killed mid-run; node 0's ranks go on alone without a restart, and the same command started
    again on node 1 rejoins with a live peer's state. Every replica holds the same parameters
    after every iteration, the env-step count is exact, and cartpole still learns."""
    from tests.reliability.test_elastic import (
        ENVS as EL_ENVS,
    )
    from tests.reliability.test_elastic import (
        STEPS as EL_STEPS,
    )
    from tests.reliability.test_elastic import (
        assert_replicas_identical,
    )

    iters = 60
    run_dir, logs, replicas = tmp_path / "run", tmp_path / "logs", tmp_path / "replicas"
    logs.mkdir()
    replicas.mkdir()
    # short-handed, the survivors wait 1 s an iteration: node 1's cold ranks join in time
    env = cli_env(DISTRL_TEST_REPLICAS=str(replicas), DISTRL_TEST_SHORT_HANDED_DELAY="1")
    extra = ("--agent.max-iterations", str(iters))

    def node(tb: Testbed, i: int) -> subprocess.Popen:
        with (logs / f"node{i}.log").open("a") as log:
            cmd = elastic_node_command(run_dir, i, *extra)
            return tb.popen(tb.nodes[i], cmd, env=env, stdout=log, stderr=subprocess.STDOUT)

    with Testbed(nodes=2, rate_mbit=1000) as tb:
        node0, node1 = node(tb, 0), node(tb, 1)
        deadline = time.monotonic() + 120
        while iterations(run_dir) < 8 and time.monotonic() < deadline:
            assert node0.poll() is None and node1.poll() is None, logs_of(logs)
            time.sleep(0.1)
        testbed._kill_netns_pids(tb.nodes[1].netns)  # the machine is gone: launcher and ranks
        node1.wait(10)
        lost_at = iterations(run_dir)
        while iterations(run_dir) < lost_at + 3 and time.monotonic() < deadline + 60:
            assert node0.poll() is None, logs_of(logs)
            time.sleep(0.1)
        node1 = node(tb, 1)  # the same command, on the machine back
        codes = wait([node0, node1], 150)
    out = logs_of(logs)
    assert codes == [0, 0], out[-4000:]
    recs = read_metrics(run_dir)
    assert [r["iteration"] for r in recs] == list(range(1, iters + 1))
    members = [r["dist/members"] for r in recs]
    assert members[:8] == [4] * 8 and 2 in members and members[-1] == 4, members
    assert recs[-1]["dist/failures"] >= 1 and recs[-1]["dist/joins"] == 2, recs[-1]
    assert "the run is under way; its slots rejoin as replacements" in out, out[-4000:]
    # both of node 1's ranks are left out at once, within --dist.timeout (5 s)
    lost = re.search(r"lost slot 2 \(pid \d+\), slot 3 \(pid \d+\) at .* in ([\d.]+) s", out)
    assert lost and float(lost.group(1)) < 8.0, out[-4000:]
    hashes = assert_replicas_identical(tmp_path)
    assert len(hashes[iters]) == 4  # node 1's new ranks hold the survivors' weights
    assert recs[-1]["env_steps"] == sum(members) * EL_ENVS * EL_STEPS
    assert recs[-1]["episode_return_mean"] >= 475, recs[-1]["episode_return_mean"]


@pytest.mark.timeout(60)
def test_testbed_is_removed_on_error_and_leftovers_are_swept():
    before = set(testbed._netns_list())
    with pytest.raises(RuntimeError, match="boom"), Testbed(nodes=2, prefix="dtrltest") as tb:
        sleeper = tb.popen(tb.nodes[0], [sys.executable, "-c", "import time; time.sleep(60)"])
        assert {n.netns for n in tb.nodes} | {tb.switch} <= set(testbed._netns_list())
        raise RuntimeError("boom")
    assert sleeper.poll() is not None, "a process started on a node outlived the testbed"
    assert set(testbed._netns_list()) == before
    # what a killed process left (a name with a pid that is gone) is swept by the next testbed
    stale = "dtrltest-4194303-0-n0"  # above pid_max's default: never a live process
    subprocess.run(["ip", "netns", "add", stale], check=True)
    try:
        assert stale in testbed.sweep("dtrltest")
    finally:
        subprocess.run(["ip", "netns", "del", stale], capture_output=True)
    assert stale not in testbed._netns_list()


@pytest.mark.long  # 2 nodes x 3 processes, twice, and a 5-rank reference: ~50 s
@pytest.mark.timeout(400)
def test_sink_nodes_on_two_machines_equal_flat_bsp_and_cut_the_bytes_between_them(tmp_path):
    """ps-bsp with one sink per machine (--dist.ps.group-size 3 on 2 machines x 3 processes)
    ends where the flat server with the same 4 workers on one machine does, and sends about a
    third of the flat server's bytes between the machines per update (one gradient up and one
    set of parameters down for machine 1 instead of three)."""
    from benchmarks.sinks import run_arm

    got = {}
    for arm, group in (("sinks", 3), ("flat", 0)):
        with Testbed(nodes=2, rate_mbit=1000) as tb:
            got[arm] = run_arm(tb, 3, group, 4, tmp_path / arm, timeout=200)
    assert got["sinks"]["workers"] == 4 and got["flat"]["workers"] == 5, got
    ratio = got["sinks"]["bytes_per_update"] / got["flat"]["bytes_per_update"]
    assert ratio < 0.5, got
    reference = [
        str(BIN / "distrl"), "train", "cartpole", "--nproc", "5", "--dist.strategy", "ps-bsp",
        "--env.num-envs", "8", "--agent.num-steps", "16", "--agent.max-iterations", "4",
        "--threads", "1", "--progress", "False", "--tensorboard", "False", "--seed", "7",
        "--run-dir", str(tmp_path / "reference"),
    ]  # fmt: skip
    code = subprocess.run(reference, env=cli_env(), capture_output=True, text=True)
    assert code.returncode == 0, code.stderr[-3000:]
    a, b = final_state(tmp_path / "sinks", 4, 6), final_state(tmp_path / "reference", 4, 5)
    worst = max(float((a["policy"][k] - b["policy"][k]).abs().max()) for k in a["policy"])
    assert worst <= 1e-5, f"max |sinks on 2 machines - flat on 1| = {worst}"
