"""The documentation site builds as `make docs` builds it, warnings as errors, and its API
reference is generated from the docstrings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_site_builds_strict(tmp_path):
    pytest.importorskip("mkdocs", reason="the docs extra is not installed (make docs installs it)")
    pytest.importorskip("mkdocstrings", reason="the docs extra is not installed (make docs)")
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    mkdocs = [sys.executable, "-m", "mkdocs"]
    proc = subprocess.run(
        [*mkdocs, "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    for name in ("distrl.train", "distrl.make_config", "distrl.TrainConfig", "distrl.VecEnv"):
        assert f'id="{name}"' in api, f"the API page has no entry for {name}"
    # a <placeholder> or * outside a code span is eaten as HTML or emphasis (it was: "default
    # runs//.", "a ckpt_.pt", "iteration_.mp4")
    for eaten in ("runs//", "ckpt_.pt", "iteration_.mp4", "gym:,"):
        assert eaten not in api, f"the API page lost text around {eaten!r}"
    assert "runs/&lt;task&gt;/&lt;timestamp&gt;" in api
    home = (site / "index.html").read_text(encoding="utf-8")
    assert "Quickstart" in home, "the home page does not show README.md"
    assert 'href="docs/' not in home, "the home page keeps README.md's links from the root"
