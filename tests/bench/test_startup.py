"""`distrl bench startup` and the ``startup/<phase>`` marks of a run's first record: a fresh
`distrl train` reports every phase once, the phases add up to the time from its process's start
to the first record, and the bench lays them beside the floors it times itself."""

from __future__ import annotations

import csv
import math

from distrl.startup import PHASES
from distrl.telemetry import read_metrics
from tests.distributed.workers import run_cli
from tests.helpers import BIN, run_main


def test_the_first_record_of_a_train_command_holds_every_phase_once(tmp_path):
    cmd = [str(BIN / "python"), "-m", "distrl.cli", "train", "cartpole"]
    cmd += [
        "--agent.max-iterations",
        "2",
        "--run-dir",
        str(tmp_path / "run"),
        "--progress",
        "False",
    ]
    code, out, err, wall = run_cli(cmd, timeout=120)
    assert code == 0, out + err
    first, second = read_metrics(tmp_path / "run")
    phases = {k.removeprefix("startup/"): v for k, v in first.items() if k.startswith("startup/")}
    assert set(phases) == {*PHASES, "total"}, phases
    assert all(v >= 0 for v in phases.values()), phases
    assert math.isclose(sum(phases[p] for p in PHASES), phases["total"], abs_tol=1e-6)
    assert phases["torch"] > 0.1  # import torch is its own phase, and not a cheap one
    assert phases["total"] < wall  # from the process's start: within the command's time
    assert not any(k.startswith("startup/") for k in second)


def test_bench_startup_writes_the_phases_and_the_floors(tmp_path, capsys):
    argv = ["bench", "startup", "--runs", "1", "--out", str(tmp_path)]
    code, out, err = run_main(argv, capsys)
    assert code == 0, out + err
    rows = {
        r["phase"]: float(r["median_s"]) for r in csv.DictReader((tmp_path / "startup.csv").open())
    }
    assert {*PHASES, "total", "wall", "after", "floor: python -c 'import torch'"} <= set(rows)
    assert rows["floor: python -c 'import torch'"] < rows["wall"]
