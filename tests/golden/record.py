"""Re-record tests/golden/reference.json (only for a change meant to alter the numbers)."""

import json
import tempfile
from pathlib import Path

import torch

from tests.distributed.harness import expect_ok, run_ranks
from tests.golden.workers import cpu_id, golden_run

if __name__ == "__main__":
    out = {
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu": cpu_id(),
        "torch": torch.__version__,
    }
    for world in (1, 2):
        with tempfile.TemporaryDirectory() as d:
            out[f"world{world}"] = expect_ok(*run_ranks(golden_run, world, d)[:2], world)[0]
    path = Path(__file__).parent / "reference.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}")
