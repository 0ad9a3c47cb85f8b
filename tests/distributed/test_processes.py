"""Real processes: DD-PPO's torchrun command as the README writes it, our `--nproc` launcher,
replicas that stay identical, and what a dead or stuck peer does to the survivors (an error
naming the peer, never a hang)."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from distrl import checkpoint as ckpt
from tests.distributed.harness import _child, expect_ok, free_port, run_ranks
from tests.distributed.workers import learn_params, run_cli, train_with_fault
from tests.helpers import BIN, tiny_train_args

NUM_ENVS, NUM_STEPS, ITERS = 32, 8, 3
SMALL = tiny_train_args(NUM_ENVS, NUM_STEPS)


def check_one_run_dir(cwd: Path, run_dir: Path, out: str) -> None:
    """Exactly what rank 0 writes, once; rank 1 wrote nothing anywhere."""
    assert sorted(p.name for p in cwd.iterdir()) == [run_dir.name], list(cwd.iterdir())
    assert sorted(p.name for p in run_dir.iterdir()) == [  # no .lock: released with the run
        "checkpoints",
        "config.yaml",
        "metrics.jsonl",
    ]
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == ITERS, lines
    recs = [json.loads(line) for line in lines]
    assert [r["iteration"] for r in recs] == list(range(1, ITERS + 1))
    assert [r["env_steps"] for r in recs] == [
        i * 2 * NUM_ENVS * NUM_STEPS for i in range(1, ITERS + 1)
    ]
    assert "distributed: true" in (run_dir / "config.yaml").read_text()
    files = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert files == [f"ckpt_{ITERS:08d}.json", f"ckpt_{ITERS:08d}.pt"], files
    state, manifest = ckpt.load_checkpoint(run_dir / "checkpoints" / files[1])
    assert manifest["world_size"] == 2 and len(state["ranks"]) == 2
    assert state["env_steps"] == ITERS * 2 * NUM_ENVS * NUM_STEPS
    # one banner and one summary: only rank 0 prints
    assert out.count("distrl: task cartpole (on-policy PPO) | 2 rank(s) x 32 envs") == 1, out
    assert out.count("distrl run summary") == 1, out


def torchrun_command(cwd: Path) -> list[str]:
    # seed 000's DD-PPO command as written, mjlab's --env.scene.num-envs included; only the
    # port is ours (torchrun's default 29500 may be taken) and the sizes are small
    head = f"--nproc_per_node=2 --master-port={free_port()} --no_python train cartpole"
    head += f" --env.scene.num-envs {NUM_ENVS}"
    tail = f"--agent.max-iterations {ITERS} --distributed True --run-dir {cwd / 'run'}"
    small = SMALL[2:]  # (after its --env.num-envs)
    assert SMALL[:2] == ["--env.num-envs", str(NUM_ENVS)]
    return [str(BIN / "torchrun"), *head.split(), *tail.split(), *small]


def nproc_launcher(cwd: Path) -> list[str]:
    args = f"train cartpole --nproc 2 --agent.max-iterations {ITERS} --run-dir {cwd / 'run'}"
    return [str(BIN / "distrl"), *args.split(), *SMALL]


@pytest.fixture(scope="module")
def launches(tmp_path_factory) -> dict[str, tuple[Path, tuple]]:
    """Both launch forms, side by side (a launch is mostly imports and waiting)."""
    cwds = {name: tmp_path_factory.mktemp(name) for name in ("torchrun", "nproc")}
    cmds = {"torchrun": torchrun_command(cwds["torchrun"]), "nproc": nproc_launcher(cwds["nproc"])}
    with ThreadPoolExecutor(2) as pool:
        futs = {k: pool.submit(run_cli, cmd, 100, cwds[k]) for k, cmd in cmds.items()}
        return {k: (cwds[k], f.result()) for k, f in futs.items()}


@pytest.mark.slow  # two real launches (torchrun and --nproc): ~15 s
@pytest.mark.timeout(150)
def test_torchrun_command_of_the_readme(launches):
    cwd, (code, out, err, secs) = launches["torchrun"]
    print(f"torchrun run: {secs:.1f} s")
    assert code == 0, out + err
    check_one_run_dir(cwd, cwd / "run", out)


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_nproc_launcher(launches):
    cwd, (code, out, err, secs) = launches["nproc"]
    print(f"--nproc run: {secs:.1f} s")
    assert code == 0, out + err
    check_one_run_dir(cwd, cwd / "run", out)


@pytest.mark.slow  # test-fast keeps bitwise-identical replicas in test_equivalence.py
@pytest.mark.timeout(90)
def test_parameters_identical_across_ranks_after_training():
    ranks = expect_ok(*run_ranks(learn_params, 2, 3, timeout=80)[:2], 2)
    a, b = ranks
    assert a["iteration"] == b["iteration"] == 3
    assert a["env_steps"] == 3 * 2 * 16 * 8
    assert torch.equal(a["params"], b["params"])
    assert torch.equal(a["buffers"], b["buffers"])  # observation normalizer
    assert torch.equal(a["optimizer"], b["optimizer"])  # Adam moments and step
    assert a["lr"] == b["lr"]
    # ... while the ranks stepped different envs (rank-offset seeds)
    assert not torch.equal(a["obs"], b["obs"])


class FaultyPair:
    """Two ranks of ``train_with_fault``: rank 1 dies or stalls at iteration 2. ``finish``
    waits for rank 0 only (a stopped rank 1 would keep the harness waiting), then kills what
    is left."""

    def __init__(self, fault: str, dist_timeout: float, tmp: Path):
        ctx = mp.get_context("spawn")
        self.q = ctx.Queue()
        self.report = tmp / "report.json"
        args = (fault, 2, str(tmp / "run"), dist_timeout, str(self.report))
        port = free_port()
        self.procs = [
            ctx.Process(
                target=_child, args=(train_with_fault, r, 2, port, self.q, args, dict(os.environ))
            )
            for r in range(2)
        ]
        self.t0 = time.monotonic()
        for p in self.procs:
            p.start()

    def finish(self, wait: float) -> tuple[int | None, float, int | None, dict | None]:
        """(rank 0 exit code, None if still running after ``wait`` s from start; seconds until
        rank 0 exited; rank 1 exit code; rank 0's report)."""
        try:
            self.procs[0].join(max(0.0, self.t0 + wait - time.monotonic()))
            elapsed = time.monotonic() - self.t0
            code0 = self.procs[0].exitcode
        finally:
            for p in self.procs:
                if p.is_alive():
                    p.kill()  # SIGKILL also ends a SIGSTOPped process
                p.join(10)
        rep = json.loads(self.report.read_text()) if self.report.exists() else None
        return code0, elapsed, self.procs[1].exitcode, rep


KILL_TIMEOUT, STOP_TIMEOUT = 20.0, 10.0


@pytest.fixture(scope="module")
def faults(tmp_path_factory):
    """Both fault scenarios at once: the stalled pair spends its time waiting anyway."""
    pairs = {
        "kill": FaultyPair("kill", KILL_TIMEOUT, tmp_path_factory.mktemp("kill")),
        "stop": FaultyPair("stop", STOP_TIMEOUT, tmp_path_factory.mktemp("stop")),
    }
    yield pairs
    for pair in pairs.values():  # normally finished by the tests already
        for p in pair.procs:
            if p.is_alive():
                p.kill()
                p.join(10)


@pytest.mark.slow  # waits out a collective timeout: ~10-20 s
@pytest.mark.timeout(90)
def test_killed_rank_makes_the_other_exit_with_an_error(faults):
    code0, elapsed, code1, rep = faults["kill"].finish(wait=70)
    print(f"rank 0: exit {code0} after {elapsed:.1f} s; report {rep}")
    assert code1 == -9
    assert code0 is not None, f"rank 0 still running {elapsed:.0f} s after start: a hang"
    assert code0 != 0
    assert rep is not None, "rank 0 exited without raising through run_training"
    assert rep["iterations_entered"] == [0, 1, 2]
    # (no latency bound: under load it flakes; the test's hard timeout catches a hang)
    assert rep["type"] == "PeerFailure", rep
    assert "rank 1 last seen at iteration 2" in rep["error"], rep  # names the missing rank


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_stuck_rank_makes_the_other_exit_with_a_timeout_error(faults):
    code0, elapsed, code1, rep = faults["stop"].finish(wait=60)
    print(f"rank 0: exit {code0} after {elapsed:.1f} s; report {rep}")
    assert code0 is not None, (
        f"rank 0 still running {elapsed:.0f} s after start although rank 1 stalled with "
        f"--dist.timeout {STOP_TIMEOUT}: the collective timeout was not honoured"
    )
    assert code0 != 0
    assert rep is not None and rep["iterations_entered"] == [0, 1, 2], rep
    # the peer is silent: the error comes from the collective timeout, not before it (how much
    # later depends on the machine's load; the test's hard timeout catches a hang)
    assert rep["seconds_after_fault"] >= STOP_TIMEOUT - 1, rep
    assert "timed out" in rep["error"].lower() or "timeout" in rep["error"].lower(), rep
    assert rep["type"] == "PeerFailure", rep
    assert "rank 1 last seen at iteration 2" in rep["error"], rep  # names the missing rank


@pytest.mark.timeout(30)
def test_config_error_stops_before_any_process_starts(tmp_path):
    run_dir = tmp_path / "run"
    # cartpole's default num_steps is 16 (3 x 16 = 48 divides by 4): give 5 steps so that the
    # rollout batch 3 x 5 = 15 does not divide into 4 minibatches
    args = "train cartpole --nproc 2 --env.num-envs 3 --agent.num-steps 5 --agent.num-minibatches 4"
    cmd = [str(BIN / "distrl"), *args.split(), "--run-dir", str(run_dir)]
    code, out, err, _ = run_cli(cmd, timeout=25)
    assert code != 0, out + err
    assert "3 envs x 5 steps = 15" in err and "--agent.num-minibatches 4" in err, err
    assert "Traceback" not in err
    assert not run_dir.exists(), "a config error must not create the run directory"
    # torchrun's agent would have logged its rendezvous/worker lines
    assert "torch.distributed" not in out + err and "rendezvous" not in (out + err).lower()
