"""Smoke run of the CleanRL-style MinAtar peer (peers/cleanrl_minatar_ppo.py): ~2k env steps
on the reference ``minatar`` package, and its closing JSON line (``long``: tests/bench)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import run_peer

pytest.importorskip("minatar", reason="the MinAtar peer steps the minatar package")
pytest.importorskip("gymnasium", reason="the MinAtar peer vectorizes with gymnasium")

PEER = Path(__file__).resolve().parents[2] / "peers" / "cleanrl_minatar_ppo.py"


@pytest.mark.timeout(180)
def test_peer_runs_and_prints_its_json_line(tmp_path):
    args = ["--game", "breakout", "--total-timesteps", "2048", "--num-envs", "8"]
    args += ["--num-steps", "64", "--seed", "0", "--threads", "1"]
    out = run_peer(PEER, args, tmp_path)
    assert out["env_steps"] == 2048 and out["iterations"] == 4  # 8 envs x 64 steps, 4 times
    assert out["wall_s"] > 0 and out["env_steps_per_s"] > 0
    assert out["episodes"] > 0  # Breakout's random-policy games last ~10 steps
    assert isinstance(out["return_mean_100"], float)
    assert out["env_id"] == "MinAtar/Breakout-v1" and out["threads"] == 1
