"""`--nproc N` launcher: the environment torchrun and its ranks start with."""

from __future__ import annotations

import os

import pytest

from distrl.distributed import early_torchrun, launch


@pytest.fixture
def started(monkeypatch) -> list[dict]:
    """What ``launch.launch`` would start torchrun with, without starting it."""
    calls: list[dict] = []

    def supervise(cmd, env, *rest):
        calls.append({"cmd": cmd, "env": env})
        return 0

    monkeypatch.setattr(launch.interrupts, "supervise", supervise)
    return calls


@pytest.mark.parametrize(("cores", "nproc", "expected"), [(8, 2, "4"), (8, 3, "2"), (1, 2, "1")])
def test_launcher_sets_each_ranks_share_of_the_cores(monkeypatch, started, cores, nproc, expected):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    assert launch.launch(nproc, 0, ["train", "cartpole"]) == 0
    (run,) = started
    assert run["env"]["OMP_NUM_THREADS"] == expected
    assert f"--nproc-per-node={nproc}" in run["cmd"]
    assert "OMP_NUM_THREADS" not in os.environ  # the launcher's own environment is untouched


def test_launcher_keeps_the_users_omp_num_threads(monkeypatch, started):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    launch.launch(2, 0, ["train", "cartpole"])
    assert started[0]["env"]["OMP_NUM_THREADS"] == "3"


def test_torchrun_gets_the_stop_timeout_and_runs_quietly_on_a_signal(started):
    """torchrun's grace before it SIGKILLs its ranks (for a signal sent to torchrun itself) is
    --stop-timeout; it runs as ``distrl.distributed.launch`` (torchrun without its traceback)."""
    launch.launch(2, 0, ["train", "cartpole"], stop_timeout=12.5)
    cmd = started[0]["cmd"]
    assert cmd[1:3] == ["-m", "distrl.distributed.launch"], cmd
    assert "--shutdown-timeout=13" in cmd, cmd


@pytest.mark.timeout(30)
def test_node_0_that_cannot_host_the_store_is_refused_naming_the_address(tmp_path, capsys):
    """--master-addr must be an address of node 0: a foreign one (TEST-NET-1) is refused
    before any rank starts, naming it and the fix."""
    from tests.helpers import QUIET, run_main

    argv = ["train", "cartpole", "--dist.strategy", "elastic", "--nnodes", "2"]
    argv += ["--master-addr", "192.0.2.1", "--run-dir", str(tmp_path / "run"), *QUIET]
    code, out, err = run_main(argv, capsys)
    assert code == 2, out + err
    assert "node 0 cannot listen on --master-addr 192.0.2.1 --master-port 29500" in err, err
    assert "Traceback" not in out + err


def test_multi_node_ranks_keep_the_users_gloo_interface(monkeypatch):
    """One machine pins Gloo to loopback; several keep the interface the user chose."""
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth7")
    assert launch.launch_env(2)["GLOO_SOCKET_IFNAME"] == launch.loopback_interface()
    assert launch.launch_env(2, one_machine=False)["GLOO_SOCKET_IFNAME"] == "eth7"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_each_ranks_time_breakdown_is_in_every_record(tmp_path):
    """Under allreduce every record holds each rank's rollout, learn, comm and sync seconds
    (rank/<r>/*): who waited for whom."""
    from distrl.telemetry import read_metrics
    from tests.distributed.workers import run_cli
    from tests.helpers import BIN

    run = tmp_path / "run"
    cmd = [str(BIN / "distrl"), "train", "cartpole", "--nproc", "2", "--agent.max-iterations"]
    cmd += ["2", "--progress", "False", "--tensorboard", "False", "--run-dir", str(run)]
    code, out, err, _ = run_cli(cmd, timeout=100)
    assert code == 0, out + err
    for record in read_metrics(run):
        for r in (0, 1):
            for part in ("rollout", "learn", "comm", "sync"):
                assert record[f"rank/{r}/{part}"] >= 0.0, (r, part, record)
        assert record["rank/0/rollout"] == pytest.approx(record["time/rollout"])


# ---- torchrun's process started before the command's imports (early_torchrun.prestart) ----------


@pytest.fixture
def prestarted(monkeypatch) -> list[str]:
    """Which ``prestart`` calls would start torchrun's process, without starting it."""
    made: list[str] = []

    class Fake:
        def __init__(self) -> None:
            made.append("warm")

        def discard(self) -> None:
            made.append("discarded")

    monkeypatch.setattr(early_torchrun, "EarlyTorchrun", Fake)
    monkeypatch.setattr(early_torchrun, "_early", None)
    for name in ("TORCHELASTIC_RUN_ID", "LOCAL_RANK", "DISTRL_ELASTIC_STANDBY"):
        monkeypatch.delenv(name, raising=False)
    return made


@pytest.mark.parametrize(
    ("argv", "starts"),
    [
        (["cartpole", "--nproc", "2"], True),
        (["cartpole", "--nproc=4", "--seed", "1"], True),
        (["cartpole"], False),
        (["cartpole", "--nproc", "1"], False),
        (["cartpole", "--nproc"], False),
        (["cartpole", "--nproc", "two"], False),
        (["cartpole", "--nproc", "2", "--dist.strategy", "elastic"], False),
        (["cartpole", "--nproc", "2", "--population", "4"], False),
        (["cartpole", "--nproc", "2", "--nnodes", "2"], False),
        (["cartpole", "--nproc", "2", "--help"], False),
    ],
)
def test_prestart_starts_torchrun_early_only_for_a_torchrun_launch(prestarted, argv, starts):
    early_torchrun.prestart(argv)
    assert prestarted == (["warm"] if starts else [])
    early_torchrun.discard()
    assert prestarted == (["warm", "discarded"] if starts else [])
    assert early_torchrun.take() is None


def test_no_prestart_inside_a_rank(prestarted, monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "0")
    early_torchrun.prestart(["cartpole", "--nproc", "2"])
    assert prestarted == []


@pytest.mark.timeout(120)
@pytest.mark.parametrize("alive", [True, False])
def test_the_early_torchrun_runs_what_it_is_sent_or_a_new_one_does(alive, capfd):
    """The early process runs torchrun with the arguments and environment sent on the pipe; if
    it died before they came, a new process runs them."""
    import sys

    warm = early_torchrun.EarlyTorchrun()
    if not alive:
        warm.proc.kill()
        warm.proc.wait()
    worker = ["--no-python", "sh", "-c", "echo mark=$DISTRL_TEST_MARK"]
    cmd = [sys.executable, "-m", "distrl.distributed.launch", "--standalone", "--nproc-per-node=1"]
    proc = warm.go([*cmd, *worker], dict(os.environ, DISTRL_TEST_MARK="sent"))
    assert (proc is warm.proc) == alive
    assert proc.wait(timeout=100) == 0
    assert "mark=sent" in capfd.readouterr().out


@pytest.mark.timeout(120)
def test_the_early_torchrun_exits_quietly_when_no_launch_takes_it():
    warm = early_torchrun.EarlyTorchrun()
    os.close(warm.write)  # the command ended (a bad config) without sending anything
    assert warm.proc.wait(timeout=100) == 0
