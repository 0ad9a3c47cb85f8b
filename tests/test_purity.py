"""DESIGN.md's boundary, enforced: pure tensor code never imports torch.distributed (ruff's
banned-api rule, configured in pyproject.toml)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUFF = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")

pytestmark = pytest.mark.skipif(RUFF is None, reason="ruff is not installed (dev extra)")


def ruff(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [RUFF, "check", "--no-cache", "--select", "TID251", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )


def test_source_tree_keeps_pure_modules_pure() -> None:
    out = ruff("src")
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("package", ["algorithms", "storage", "policy", "envs"])
def test_the_rule_fires_in_every_pure_package(package: str) -> None:
    name = f"src/distrl/{package}/probe.py"
    out = ruff("--stdin-filename", name, "-", stdin="import torch.distributed as dist\n")
    assert out.returncode != 0 and "TID251" in out.stdout, out.stdout + out.stderr


def test_the_strategies_may_use_it() -> None:
    name = "src/distrl/distributed/probe.py"
    out = ruff("--stdin-filename", name, "-", stdin="import torch.distributed as dist\n")
    assert out.returncode == 0, out.stdout + out.stderr
