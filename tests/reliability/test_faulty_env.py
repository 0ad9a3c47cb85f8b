"""Faulty environments: an exception from an env, or NaN/Inf in what it returns, stops every rank
with an error that names rank, env index, step (and field); no checkpoint follows the fault.
A non-finite loss or gradient on one rank makes every rank skip the update together."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from distrl import checkpoint as ckpt
from distrl.envs.registry import get_task
from distrl.runner.on_policy import EnvStepError, NonFiniteEnvError
from distrl.session import run_training
from tests.fixtures.faulty import EnvFault, FaultyEnv, parse_faults
from tests.helpers import BIN
from tests.reliability.workers import faulty_train, poisoned_rewards, run_group, tiny_config

DIST_TIMEOUT = 15.0
MARGIN = 25.0  # process start-up (torch imports on 2 shared cores) and teardown


def checkpoints(run_dir: Path) -> list[int]:
    return sorted(
        ckpt.checkpoint_iteration(p) for p in ckpt.list_checkpoints(run_dir / "checkpoints")
    )


# ---- the fault-injecting env itself ------------------------------------------------------------


@pytest.mark.timeout(10)
def test_faulty_env_raises_and_corrupts_on_cue_only():
    env = FaultyEnv(4, raise_at=[(3, 2)], nan_at=[(1, 1, "reward")], inf_at=[(2, 3, "obs")])
    env.reset(seed=0)
    a = torch.zeros(4, dtype=torch.long)
    _, r0, *_ = env.step(a)
    _, r1, *_ = env.step(a)
    o2, r2, *_ = env.step(a)
    assert torch.isfinite(r0).all() and torch.isfinite(r2).all()
    assert r1.isnan().tolist() == [False, True, False, False]
    assert o2[3].isinf().all() and torch.isfinite(o2[:3]).all()
    assert torch.isfinite(env.inner.state).all(), "the injected Inf leaked into the env's state"
    with pytest.raises(EnvFault, match="env 2 failed") as e:
        env.step(a)
    assert isinstance(e.value, RuntimeError) and e.value.env_index == 2 and e.value.step == 3


@pytest.mark.timeout(10)
def test_fault_spec_from_the_environment(monkeypatch):
    monkeypatch.setenv("RANK", "1")
    spec = "raise:5:3@1; nan:7:1:reward; inf:9:0:obs@0"
    assert parse_faults(spec) == {"raise_at": [(5, 3)], "nan_at": [(7, 1, "reward")], "inf_at": []}
    with pytest.raises(ValueError, match="bad DISTRL_FAULTS item 'nan:7:1:action'"):
        parse_faults("nan:7:1:action")
    monkeypatch.setenv("DISTRL_FAULTS", "raise:0:1")
    env = get_task("faulty-cartpole").make_env(2, torch.device("cpu"), None)
    env.reset(seed=0)
    with pytest.raises(EnvFault):
        env.step(torch.zeros(2, dtype=torch.long))
    monkeypatch.delenv("DISTRL_FAULTS")  # unset: the task, with no faults
    env = get_task("faulty-cartpole").make_env(2, torch.device("cpu"), None)
    assert isinstance(env, FaultyEnv) and not env.raise_at and not env.corrupt_at


@pytest.mark.timeout(60)
def test_the_fault_task_is_no_task_of_the_package_and_the_command_line_imports_it(tmp_path):
    import subprocess

    from tests.distributed.workers import cli_env

    def train(*args: str) -> subprocess.CompletedProcess:
        cmd = [str(BIN / "distrl"), "train", *args, "--run-dir", str(tmp_path / "r")]
        return subprocess.run(cmd, capture_output=True, text=True, env=cli_env(), timeout=50)

    r = train("faulty-cartpole")  # without the fixture module: unknown, and not listed
    assert r.returncode == 2 and "unknown task 'faulty-cartpole'" in r.stderr, r.stderr
    listed = subprocess.run(
        [str(BIN / "distrl"), "list"], capture_output=True, text=True, env=cli_env(), timeout=50
    )
    assert listed.returncode == 0 and "faulty-cartpole" not in listed.stdout
    r = train("--import", "tests.fixtures.faulty", "faulty-cartpole", "--help")
    assert r.returncode == 0 and "train faulty-cartpole" in r.stdout, r.stdout + r.stderr
    assert "slow-ranks" not in r.stdout  # no test-only flag among a task's options
    r = train("--import", "tests.fixtures.nonesuch", "cartpole")
    assert r.returncode == 2 and "--import tests.fixtures.nonesuch: no module named" in r.stderr


# ---- one process -------------------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_env_exception_names_rank_env_and_step_and_chains_the_original(tmp_path, monkeypatch):
    monkeypatch.setenv("DISTRL_FAULTS", "raise:13:5")
    with pytest.raises(EnvStepError) as e:
        run_training(tiny_config("faulty-cartpole", str(tmp_path), distributed=False))
    msg = str(e.value)
    assert msg.startswith("rank 0: env step 13 failed in env 5"), msg
    assert "EnvFault: env 5 failed" in msg, msg
    assert isinstance(e.value.__cause__, EnvFault) and e.value.__cause__.env_index == 5
    assert checkpoints(tmp_path) == [1], "checkpoint after the failed iteration 1 (steps 8-15)"


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        ("nan:13:2:reward", "rank 0: env 2 returned a non-finite reward at step 13"),
        ("inf:10:7:obs", "rank 0: env 7 returned a non-finite observation at step 10"),
        ("nan:15:1:obs", "rank 0: env 1 returned a non-finite observation at step 15"),  # last step
    ],
)
def test_nonfinite_env_output_names_rank_env_step_and_field(tmp_path, monkeypatch, fault, expected):
    monkeypatch.setenv("DISTRL_FAULTS", fault)
    with pytest.raises(NonFiniteEnvError) as e:
        run_training(tiny_config("faulty-cartpole", str(tmp_path), distributed=False))
    assert str(e.value).startswith(expected), str(e.value)
    # iteration 1 holds steps 8..15: the last good iteration is 1, nothing is saved after it
    assert checkpoints(tmp_path) == [1]


# ---- two ranks ---------------------------------------------------------------------------------


def two_ranks_with_fault(faults: str, tmp_path: Path) -> tuple[dict, dict, float, dict]:
    report = str(tmp_path / "report")
    results, codes, secs = run_group(
        faulty_train,
        2,
        faults,
        str(tmp_path / "run"),
        DIST_TIMEOUT,
        report,
        timeout=DIST_TIMEOUT + MARGIN + 20,
    )
    reps = {
        r: json.loads(Path(f"{report}.{r}.json").read_text())
        for r in range(2)
        if Path(f"{report}.{r}.json").exists()
    }
    print(f"2 ranks, faults {faults!r}: exit codes {codes} after {secs:.1f} s; reports {reps}")
    return results, codes, secs, reps


@pytest.mark.slow  # 2 ranks started, one faults
@pytest.mark.timeout(90)
def test_env_exception_on_one_rank_stops_both(tmp_path):
    results, codes, secs, reps = two_ranks_with_fault("raise:11:3@1", tmp_path)
    assert codes[0] not in (0, None) and codes[1] not in (0, None), (codes, results)
    r1 = reps[1]
    assert r1["type"] == "EnvStepError", r1
    assert r1["error"].startswith("rank 1: env step 11 failed in env 3"), r1
    assert r1["cause_type"] == "EnvFault" and r1["cause"] == "env 3 failed", r1
    assert r1["cause_env_index"] == 3
    assert reps[0]["type"] is not None, "rank 0 did not fail through run_training"
    assert checkpoints(tmp_path / "run") == [1]


@pytest.mark.slow  # 2 ranks started, one faults
@pytest.mark.timeout(90)
def test_nonfinite_observation_on_one_rank_stops_both(tmp_path):
    results, codes, secs, reps = two_ranks_with_fault("nan:11:2:obs@1", tmp_path)
    assert codes[0] not in (0, None) and codes[1] not in (0, None), (codes, results)
    assert reps[1]["type"] == "NonFiniteEnvError", reps[1]
    assert reps[1]["error"].startswith(
        "rank 1: env 2 returned a non-finite observation at step 11"
    ), reps[1]
    assert reps[0]["type"] is not None, reps[0]
    assert checkpoints(tmp_path / "run") == [1], "a checkpoint was written after the fault"


@pytest.mark.slow  # 2 ranks started, one faults
@pytest.mark.timeout(90)
def test_nonfinite_loss_on_one_rank_skips_on_every_rank_then_stops(tmp_path):
    # 2 epochs x 2 minibatches = 4 updates per iteration, all skipped where rank 1 has NaN.
    # Poisoned iterations 1, 3, 4 with at most 5 consecutive skips: iteration 1 skips 4 (then
    # iteration 2 resets the run of skips), 3 skips 4, and the first update of 4 is the 5th.
    run_dir = tmp_path / "run"
    results, codes, secs = run_group(poisoned_rewards, 2, str(run_dir), [1, 3, 4], 5, timeout=80)
    assert codes == {0: 0, 1: 0}, results
    import pickle

    r0, r1 = (pickle.loads(results[r][1]) for r in range(2))
    for r in (r0, r1):
        assert [h["skipped"] for h in r["history"]] == [0, 4, 0, 4], r["history"]
        assert [h["skipped_total"] for h in r["history"]] == [0, 4, 4, 8]
        assert r["error"] is not None and "5 consecutive updates skipped" in r["error"]
        assert "--agent.max-consecutive-skips=5" in r["error"]
    for h0, h1 in zip(r0["history"], r1["history"], strict=True):
        assert torch.equal(h0["params"], h1["params"]), f"replicas differ at {h0['iteration']}"
    h = r0["history"]
    assert torch.equal(h[1]["params"], h[0]["params"]), "a skipped iteration changed parameters"
    assert not torch.equal(h[2]["params"], h[1]["params"])
    # checkpoints after the clean iterations 0 and 2 only (names count completed iterations)
    assert checkpoints(run_dir) == [1, 3]
