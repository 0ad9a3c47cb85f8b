"""The scripts in examples/ run as a user runs them: a fresh interpreter in a scratch directory,
and the own-env script also on 2 ranks under torchrun (the same script, unchanged)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import BIN

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def _run(cmd: list[str], cwd: Path) -> str:
    env = {**os.environ, "COLUMNS": "200", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=220)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def _final_return(out: str, task: str) -> float:
    found = re.findall(rf"^{task}: return (-?[0-9.]+)", out, re.M)
    assert found, out[-2000:]
    return float(found[-1])


def test_own_env_example_learns(tmp_path):
    out = _run([sys.executable, str(EXAMPLES / "own_env.py")], tmp_path)
    assert _final_return(out, "goto") > -10.0  # a still point scores about -33
    assert len(list((tmp_path / "runs" / "goto").iterdir())) == 1


def test_own_env_example_under_torchrun(tmp_path):
    out = _run(
        [str(BIN / "torchrun"), "--nproc-per-node", "2", str(EXAMPLES / "own_env.py")], tmp_path
    )
    assert out.count("goto: return") == 1, "only rank 0 reports"
    assert _final_return(out, "goto") > -10.0
    assert "2 rank(s)" in out


@pytest.mark.long  # 12 s: make test keeps to about 10 minutes; CI runs it
def test_own_network_example_solves_cartpole(tmp_path):
    out = _run([sys.executable, str(EXAMPLES / "own_network.py")], tmp_path)
    assert "LayerNorm" in out
    assert _final_return(out, "cartpole") >= 475.0


@pytest.mark.skipif(
    importlib.util.find_spec("onnxruntime") is None,
    reason="needs the export extra: pip install -c constraints.txt -e '.[export]'",
)
def test_quickstart_trains_to_475_exports_onnx_and_onnxruntime_agrees(tmp_path):
    out = _run([sys.executable, str(EXAMPLES / "quickstart.py")], tmp_path)
    assert "onnxruntime agrees on 100.0% of 1000 actions" in out
    assert (next((tmp_path / "runs" / "cartpole").iterdir()) / "exported" / "policy.onnx").is_file()


def test_sb3_style_example_stops_at_475_predicts_evaluates_saves_and_loads(tmp_path):
    out = _run([sys.executable, str(EXAMPLES / "sb3_style.py")], tmp_path)
    line = r"^stopped at iteration (\d+): StopAtReturn.after_iteration returned False$"
    stopped = re.search(line, out, re.M)
    assert stopped and int(stopped.group(1)) < 100, out[-2000:]  # before the budget ran out
    from distrl.telemetry import read_metrics

    (run,) = (tmp_path / "runs" / "cartpole").iterdir()
    last = read_metrics(run / "metrics.jsonl")[-1]
    assert last["iteration"] == int(stopped.group(1)) and last["episode_return_mean"] >= 475
    assert re.search(r"^gymnasium CartPole-v1: one episode, return \d+$", out, re.M)
    evaluated = re.search(r"^evaluate: (return .*) over 20 episodes$", out, re.M)
    loaded = re.search(r"^loaded cartpole_policy.pt: (return .*) over 20 episodes$", out, re.M)
    assert evaluated and loaded and evaluated.group(1) == loaded.group(1), out[-2000:]
