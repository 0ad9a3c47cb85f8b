"""Seeds and random streams, in one place: which seed a rank uses, seeding a process, and the
process-global generators (torch, CUDA, numpy, ``random``) captured and put back.

- ``rank_seed``: seed + the rank a process seeds as (``Strategy.seed_rank``);
- ``seed_everything``: torch, numpy and ``random`` from one seed;
- ``capture_rng_state`` / ``restore_rng_state``: the global generators as a checkpoint-safe
  value (``torch.load(weights_only=True)`` reads it back), in every rank's checkpoint part;
- ``host_rng`` / ``set_host_rng`` and ``rng_untouched``: put back what code run in between
  (an evaluation, a film, ``distrl.train`` inside a user's process) drew.

The generators the algorithms and envs own (a ``torch.Generator`` each: the minibatch shuffle,
an env's draws) are state of their owners, seeded from ``rank_seed`` and saved with them.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def rank_seed(base_seed: int, rank: int) -> int:
    """Seed = base + global rank (the local rank would repeat seeds on every node)."""
    return base_seed + rank


def seed_everything(seed: int) -> None:
    """torch, numpy and ``random``: nothing here draws from the last two, but checkpoints
    capture their state, so two runs with one seed write identical checkpoints."""
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)


def host_rng() -> tuple[Any, ...]:
    """torch's (CPU), numpy's and ``random``'s global generator states, as they are."""
    return torch.get_rng_state(), np.random.get_state(), random.getstate()


def set_host_rng(states: tuple[Any, ...]) -> None:
    """Put back what ``host_rng`` returned."""
    torch.set_rng_state(states[0])
    np.random.set_state(states[1])
    random.setstate(states[2])


class rng_untouched:
    """Put back torch's, numpy's and ``random``'s global RNG states on exit: what runs inside
    cannot shift the random streams of training."""

    def __enter__(self) -> None:
        self.states = host_rng()

    def __exit__(self, *exc: object) -> None:
        set_host_rng(self.states)


def capture_rng_state() -> dict:
    """Global RNG states of torch (CPU, CUDA), numpy and ``random``, safe for weights_only.

    ``torch.load(weights_only=True)`` refuses numpy arrays and arbitrary objects, so numpy's
    MT19937 key becomes an int64 tensor and every other part a plain int/float/str/list.
    CUDA states are captured only when CUDA is initialised (otherwise nothing drew from them).
    """
    np_name, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state(legacy=True)
    py_version, py_internal, py_gauss_next = random.getstate()
    cuda = (
        [s.clone() for s in torch.cuda.get_rng_state_all()] if torch.cuda.is_initialized() else []
    )
    return {
        "torch": torch.get_rng_state(),
        "cuda": cuda,
        "numpy": {
            "bit_generator": str(np_name),
            # uint32 key words fit in int64 exactly.
            "keys": torch.from_numpy(np.asarray(np_keys, dtype=np.int64)),
            "pos": int(np_pos),
            "has_gauss": int(np_has_gauss),
            "cached_gaussian": float(np_gauss),
        },
        "python": {
            "version": int(py_version),
            "internal": [int(x) for x in py_internal],
            "gauss_next": None if py_gauss_next is None else float(py_gauss_next),
        },
    }


def restore_rng_state(d: dict) -> None:
    """Inverse of ``capture_rng_state`` (after any ``map_location``: tensors may be anywhere).

    CUDA states are restored for the devices both the capture and this process have; a run
    moved from GPU to CPU simply has none to restore.
    """
    missing = [k for k in ("torch", "cuda", "numpy", "python") if k not in d]
    if missing:
        raise ValueError(f"RNG state lacks {', '.join(missing)}")
    torch.set_rng_state(d["torch"].to(device="cpu", dtype=torch.uint8))
    if d["cuda"] and torch.cuda.is_available():
        n = min(len(d["cuda"]), torch.cuda.device_count())
        for i in range(n):
            torch.cuda.set_rng_state(d["cuda"][i].to(device="cpu", dtype=torch.uint8), i)
    npd = d["numpy"]
    np.random.set_state(
        (
            npd["bit_generator"],
            npd["keys"].cpu().numpy().astype(np.uint32),
            int(npd["pos"]),
            int(npd["has_gauss"]),
            float(npd["cached_gaussian"]),
        )
    )
    pyd = d["python"]
    random.setstate(
        (int(pyd["version"]), tuple(int(x) for x in pyd["internal"]), pyd["gauss_next"])
    )
