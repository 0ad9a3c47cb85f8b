"""Smoke run of the CleanRL-style Atari peer (peers/cleanrl_atari_envpool_ppo.py): one
iteration of Pong through EnvPool, and its closing JSON line (``long``: tests/bench)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import run_peer

pytest.importorskip("envpool", reason="the Atari peer steps an EnvPool pool (the envpool extra)")

PEER = Path(__file__).resolve().parents[2] / "peers" / "cleanrl_atari_envpool_ppo.py"


@pytest.mark.timeout(180)
def test_peer_runs_and_prints_its_json_line(tmp_path):
    args = ["--game", "pong", "--total-timesteps", "1024", "--seed", "0", "--threads", "1"]
    out = run_peer(PEER, args, tmp_path)
    assert out["env_steps"] == 1024 and out["iterations"] == 1  # 8 envs x 128 steps
    assert out["wall_s"] > 0 and out["env_steps_per_s"] > 0
    assert out["rollout_s"] > 0 and out["update_s"] > 0
    assert out["env_id"] == "Pong-v5" and out["threads"] == 1
