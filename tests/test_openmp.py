"""distrl's processes let idle OpenMP threads sleep unless the user chose otherwise
(``distrl/openmp.py``): a run beside a second one otherwise collapsed (80x on cartpole's update
here, ``distrl bench neighbour``). The setting must be in the environment before torch loads
its OpenMP runtime, which reads it once."""

from __future__ import annotations

import os
import subprocess
import sys

from distrl.distributed.launch import launch_env

PROBE = (
    "import os, sys; import distrl.cli; "
    "print('torch' in sys.modules, os.environ.get('OMP_WAIT_POLICY'))"
)


def _probe(**env: str) -> str:
    base = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=base | env, capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def test_the_command_line_sets_passive_waiting_before_torch_loads():
    assert _probe() == "False PASSIVE"


def test_a_wait_policy_the_user_set_is_kept():
    assert _probe(OMP_WAIT_POLICY="ACTIVE") == "False ACTIVE"


def test_the_launchers_ranks_start_with_it(monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert launch_env(2)["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert launch_env(2)["OMP_WAIT_POLICY"] == "ACTIVE"
