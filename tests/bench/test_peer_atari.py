"""Smoke run of the CleanRL-style Atari peer (peers/cleanrl_atari_envpool_ppo.py): one
iteration of Pong through EnvPool, and its closing JSON line (``long``: tests/bench)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("envpool", reason="the Atari peer steps an EnvPool pool (the envpool extra)")

PEER = Path(__file__).resolve().parents[2] / "peers" / "cleanrl_atari_envpool_ppo.py"


@pytest.mark.timeout(180)
def test_peer_runs_and_prints_its_json_line(tmp_path):
    cmd = [sys.executable, str(PEER), "--game", "pong", "--total-timesteps", "1024"]
    cmd += ["--seed", "0", "--threads", "1", "--quiet"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=170)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = [json.loads(s) for s in proc.stdout.splitlines() if s.startswith("{")]
    assert len(lines) == 1, proc.stdout  # --quiet: only the closing line
    out = lines[0]
    assert out["env_steps"] == 1024 and out["iterations"] == 1  # 8 envs x 128 steps
    assert out["wall_s"] > 0 and out["env_steps_per_s"] > 0
    assert out["rollout_s"] > 0 and out["update_s"] > 0
    assert out["env_id"] == "Pong-v5" and out["threads"] == 1
