"""`distrl bench offpolicy`'s --side, --first-seed, --flags and solved count, with both sides'
runs stubbed (tests/bench/test_offpolicy.py trains for real, as a long test)."""

from __future__ import annotations

import os
import subprocess

import pytest

from benchmarks import offpolicy as bench


def _stub_sides(monkeypatch) -> list[tuple[str, int, str]]:
    """Both sides' runs replaced by stubs that record (side, seed, flags) and score seed 4 and
    up as solved."""
    calls: list[tuple[str, int, str]] = []

    def row(side: str, seed: int) -> dict:
        ret = 500.0 if seed >= 4 else 100.0
        return {"side": side, "seed": seed, "steps": 10, "wall_s": 1.0, "sps": 10.0,
                "eval_return_mean": ret, "eval_return_std": 0.0}  # fmt: skip

    def distrl(a, seed, out):
        calls.append(("distrl", seed, a.flags))
        return row("distrl", seed)

    def peer(a, seed):
        calls.append(("sb3", seed, a.flags))
        return row("sb3", seed)

    def cleanrl(a, seed, out):
        calls.append(("cleanrl", seed, a.flags))
        return row("cleanrl", seed)

    monkeypatch.setattr(bench, "_distrl", distrl)
    monkeypatch.setattr(bench, "_peer", peer)
    monkeypatch.setattr(bench, "_cleanrl", cleanrl)
    return calls


@pytest.mark.parametrize(
    ("side", "sides"),
    [
        ("both", ["distrl", "sb3"]),
        ("distrl", ["distrl"]),
        ("sb3", ["sb3"]),
        ("all", ["distrl", "sb3", "cleanrl"]),
        ("cleanrl", ["cleanrl"]),
    ],
)
def test_runs_the_sides_asked_from_the_first_seed(tmp_path, monkeypatch, side, sides):
    calls = _stub_sides(monkeypatch)
    (tmp_path / "checkout" / "cleanrl").mkdir(parents=True)
    args = bench.OffPolicyArgs(algorithm="dqn", task="cartpole", seeds=3, first_seed=3,
                               side=side, flags="--env.num-envs 1", out=str(tmp_path),
                               cleanrl=str(tmp_path / "checkout"))  # fmt: skip
    summary = bench.offpolicy(args)
    assert calls == [(s, seed, "--env.num-envs 1") for seed in (3, 4, 5) for s in sides]
    assert [r["side"] for r in summary] == sides
    assert all(r["runs"] == 3 and r["solved"] == 2 for r in summary)  # seeds 4 and 5


def _capture_commands(monkeypatch) -> list[list[str]]:
    """subprocess.run replaced: it records each command and stops there (the command is all
    these tests read)."""
    seen: list[list[str]] = []

    def run(cmd, **kwargs):
        seen.append(cmd)
        raise RuntimeError("stop")

    monkeypatch.setattr(bench.subprocess, "run", run)
    return seen


def test_flags_reach_distrl_train(tmp_path, monkeypatch):
    seen = _capture_commands(monkeypatch)
    flags = "--env.num-envs 1 --agent.num-steps 256"
    args = bench.OffPolicyArgs(algorithm="dqn", task="cartpole", flags=flags)
    with pytest.raises(RuntimeError, match="stop"):
        bench._distrl(args, 0, tmp_path)
    assert seen[0][-4:] == ["--env.num-envs", "1", "--agent.num-steps", "256"]


def test_the_peer_alone_needs_its_python(tmp_path):
    args = bench.OffPolicyArgs(task="cartpole", side="sb3", peer_python="", out=str(tmp_path))
    with pytest.raises(ValueError, match="--peer-python"):
        bench.offpolicy(args)


def test_threads_reach_both_sides_and_halfcheetah_has_its_twin(tmp_path, monkeypatch):
    seen = _capture_commands(monkeypatch)
    args = bench.OffPolicyArgs(algorithm="sac", task="halfcheetah", threads=1)
    for side in (lambda: bench._distrl(args, 0, tmp_path), lambda: bench._peer(args, 0)):
        with pytest.raises(RuntimeError, match="stop"):
            side()
    distrl, peer = seen
    assert distrl[-2:] == ["--threads", "1"] and peer[-2:] == ["--threads", "1"]
    assert peer[2:4] == ["sac", "HalfCheetah-v5"]
    default = bench.OffPolicyArgs(algorithm="sac", task="halfcheetah")
    with pytest.raises(RuntimeError, match="stop"):
        bench._peer(default, 0)
    assert "--threads" not in seen[-1]  # each side's own default, as a user gets it


def test_cleanrl_needs_a_checkout_and_is_read_from_what_its_script_prints(tmp_path, monkeypatch):
    args = bench.OffPolicyArgs(task="halfcheetah", side="cleanrl", out=str(tmp_path))
    with pytest.raises(ValueError, match="give --cleanrl, a checkout"):
        bench.offpolicy(args)
    seen: list[tuple[list[str], dict]] = []
    episodes = "".join(f"global_step={i}, episodic_return=[{i}.5]\n" for i in range(1, 13))

    def run(cmd, **kwargs):
        seen.append((cmd, kwargs["env"]))
        return subprocess.CompletedProcess(cmd, 0, episodes + "SPS: 40\nSPS: 45\n", "")

    monkeypatch.setattr(bench.subprocess, "run", run)
    args = bench.OffPolicyArgs(algorithm="sac", task="halfcheetah", threads=1, cleanrl="/c")
    row = bench._cleanrl(args, 3, tmp_path)
    cmd, env = seen[0]
    assert cmd[0] == os.path.abspath(".venv-cleanrl/bin/python")  # it runs in the results dir
    assert cmd[1] == "/c/cleanrl/sac_continuous_action.py"
    assert cmd[2:] == ["--env-id", "HalfCheetah-v4", "--seed", "3", "--total-timesteps", "20000"]
    assert env["OMP_NUM_THREADS"] == "1" and env["PYTHONPATH"] == "/c"
    assert (tmp_path / "cleanrl-sac-halfcheetah-seed3.log").read_text().startswith("global_step=1")
    assert row["sps"] == 45.0 and row["eval_return_mean"] == 8.0  # the last 10: 3.5 .. 12.5
