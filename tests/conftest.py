"""Suite-wide fixtures."""

import random

import numpy as np
import pytest
import torch


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
