"""`bench finetune`: the summary over seeds (gain over the same seed's clone), and one tiny real
pass through demos, pretrain, fine-tuning on 2 ranks, scratch and the held-out evaluations."""

from __future__ import annotations

import pytest

from benchmarks.finetune import FinetuneArgs, finetune, summarize
from tests.helpers import read_csv


def _row(method, k, seed, success, **more):
    return {"method": method, "demos": k, "seed": seed, "success": success, "task/a": success,
            **more}  # fmt: skip


def test_summary_is_per_method_and_demos_and_gains_are_over_the_same_seeds_clone():
    rows = [
        _row("bc", 1, 0, 0.5, command_s=2.0),
        _row("bc+rloo", 1, 0, 0.9, command_s=30.0, iterations=10, env_steps=100),
        _row("bc", 1, 1, 0.7, command_s=4.0),
        _row("bc+rloo", 1, 1, 0.8, command_s=50.0, iterations=20, env_steps=300),
        _row("rloo (scratch)", 0, 0, 0.3, command_s=60.0, iterations=40, env_steps=900),
    ]
    s = {(r["method"], r["demos"]): r for r in summarize(rows)}
    ft = s[("bc+rloo", 1)]
    assert ft["success_mean"] == pytest.approx(0.85) and ft["success_min"] == 0.8
    assert ft["delta_vs_bc"] == pytest.approx(((0.9 - 0.5) + (0.8 - 0.7)) / 2)
    assert ft["median_command_s"] == 40.0 and ft["median_iterations"] == 15
    assert ft["task/a"] == pytest.approx(0.85)
    assert s[("bc", 1)]["delta_vs_bc"] is None and s[("bc", 1)]["median_iterations"] is None
    assert s[("rloo (scratch)", 0)]["success_mean"] == 0.3


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="at least 1"):
        finetune(FinetuneArgs(seeds=0))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_one_tiny_pass_writes_every_row(tmp_path):
    a = FinetuneArgs(demos=(1,), seeds=1, eval_episodes=2, out=str(tmp_path),
                     extra=("--agent.max-iterations 2",))  # fmt: skip
    summary = finetune(a)
    assert [(r["method"], r["demos"]) for r in summary] == [
        ("bc", 1), ("bc+rloo", 1), ("rloo (scratch)", 0)]  # fmt: skip
    rows = read_csv(tmp_path / "per_run.csv")
    assert [r["method"] for r in rows] == ["bc", "bc+rloo", "rloo (scratch)"]
    assert all(0.0 <= float(r["success"]) <= 1.0 for r in rows)
    assert rows[1]["iterations"] == "2" and int(rows[1]["env_steps"]) > 0
    assert sum(k.startswith("task/") for k in rows[0]) == 10
    assert (tmp_path / "ft1-seed0" / "held_out.json").is_file()
