"""`distrl bench`: the CLI runs the checkout's top-level ``benchmarks`` package, and says plainly
that benchmarks run from a checkout where there is none; the package itself holds none."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import run_main

ROOT = Path(__file__).resolve().parents[2]


def test_bench_runs_the_checkouts_benchmarks(capsys):
    code, out, _ = run_main(["bench", "--help"], capsys)
    assert code == 0 and "usage: distrl bench <what>" in out and "straggler" in out


def test_without_a_checkout_bench_says_where_benchmarks_run(capsys, monkeypatch, tmp_path):
    from distrl import cli

    monkeypatch.setattr(cli, "__file__", str(tmp_path / "site-packages" / "distrl" / "cli.py"))
    code, _, err = run_main(["bench", "throughput"], capsys)
    assert code == 2 and "runs the benchmarks of a source checkout" in err, err


def test_the_package_holds_no_benchmark_testbed_or_fixture():
    src = ROOT / "src" / "distrl"
    assert not (src / "bench").exists()
    assert not (src / "envs" / "faulty.py").exists() and not (src / "envs" / "slow.py").exists()
    text = "\n".join(p.read_text(encoding="utf-8") for p in src.rglob("*.py"))
    for word in ("DISTRL_FAULTS", "slow_ranks", "HOOKS", "import benchmarks", "from benchmarks"):
        assert word not in text, word
