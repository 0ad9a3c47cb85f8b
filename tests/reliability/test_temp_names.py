"""Writers of one file never share a temporary: `distrl export` writes `.tmp-<out>.<pid>.<hex>`
beside its output (it was `<out>.tmp`, one name for every writer), so two exports of the same
output that interleave both finish, and no temporary is left. (config.yaml: tests/test_telemetry.py;
checkpoints: tests/test_checkpoint.py.)"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers import api_train


@pytest.mark.timeout(120)
def test_two_exports_of_one_output_interleaved_do_not_collide(tmp_path, monkeypatch):
    from distrl import exporting

    api_train("cartpole", tmp_path / "run")
    out = tmp_path / "policy.pt"
    real_replace = os.replace
    temps: list[str] = []

    def replace(src, dst):
        temps.append(Path(src).name)
        if len(temps) == 1:  # the first export, caught between its write and its rename
            exporting.export_policy(tmp_path / "run", "torchscript", out, check=False)
        real_replace(src, dst)

    monkeypatch.setattr(exporting.os, "replace", replace)
    exporting.export_policy(tmp_path / "run", "torchscript", out, check=False)
    monkeypatch.undo()
    assert len(temps) == 2 and temps[0] != temps[1], temps
    assert all(t.startswith(f".tmp-policy.pt.{os.getpid()}.") for t in temps), temps
    assert sorted(p.name for p in tmp_path.iterdir()) == ["policy.pt", "policy.pt.json", "run"]
    assert exporting.read_metadata(out)["export_format"] == "torchscript"
