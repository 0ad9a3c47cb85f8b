"""Suite-wide fixtures, and the ``long`` mark for whole directories."""

import random
from pathlib import Path

import numpy as np
import pytest
import torch

LONG_DIRS = [Path(__file__).parent / d for d in ("bench", "cluster")]


def pytest_collection_modifyitems(items):
    """Benchmark smoke runs (tests/bench) and the namespace testbed (tests/cluster) are
    ``long``: make test-all and CI run them, make test does not."""
    for item in items:
        if any(Path(item.fspath).is_relative_to(d) for d in LONG_DIRS):
            item.add_marker(pytest.mark.long)


@pytest.fixture(autouse=True)
def _restore_global_state(monkeypatch):
    """In-process runs set torch's threads and RNG; nothing may leak into other tests."""
    monkeypatch.setenv("COLUMNS", "500")  # rich wraps console lines (and paths) at the width
    monkeypatch.delenv("DISTRL_FAULTS", raising=False)
    threads = torch.get_num_threads()
    rng = torch.get_rng_state()
    np_state, py_state = np.random.get_state(), random.getstate()
    yield
    torch.set_num_threads(threads)
    torch.set_rng_state(rng)
    np.random.set_state(np_state)
    random.setstate(py_state)
    torch.set_flush_denormal(False)  # run_training turns it on for CPU ranks; off by default


@pytest.fixture(scope="session")
def two_rank_reference(tmp_path_factory):
    """Run directory of one uninterrupted 2-rank run (seed 0, tests.reliability.conftest's
    ``two_rank_command``): what the determinism, elastic-restart and namespace-testbed tests
    must equal bit for bit. Session-wide, so the suite starts it once."""
    from tests.reliability.conftest import two_rank_command
    from tests.reliability.workers import run_cli

    run_dir = tmp_path_factory.mktemp("two_rank_reference") / "run"
    code, out, err, secs = run_cli(two_rank_command(run_dir), timeout=60)
    print(f"2-rank reference run: {secs:.1f} s")
    assert code == 0, out + err
    return run_dir
