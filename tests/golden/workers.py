"""A fixed-seed training run through the real entry point, reduced to what must never change by
a refactor: the final checkpoint's tensors (as a sha256 of their bytes) and every non-timing
value of ``metrics.jsonl``."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from distrl.config import AgentConfig, EnvConfig, TrainConfig
from tests.helpers import TIMING_KEYS

TIMING = TIMING_KEYS


def golden_config(run_dir: str, distributed: bool) -> TrainConfig:
    # adaptive LR, global advantage normalization, the observation normalizer and truncated
    # episodes (max_episode_steps 20) all take part
    return TrainConfig(
        task="cartpole",
        env=EnvConfig(num_envs=16, max_episode_steps=20),
        agent=AgentConfig(
            num_steps=16,
            num_epochs=3,
            num_minibatches=4,
            learning_rate=3e-3,
            lr_schedule="adaptive",
            desired_kl=0.002,
            max_iterations=6,
            save_interval=3,
        ),
        distributed=distributed,
        run_dir=run_dir,
        tensorboard=False,
        progress=False,
        threads=1,
        seed=7,
        device="cpu",  # the reference was recorded on CPU (a GPU draws other random streams)
    )


def cpu_id() -> str:
    """The processor's vendor, family and model (Linux; "" elsewhere). Two CPUs of the same
    vector capability (``get_cpu_capability`` says AVX512 for both) still round differently
    when their kernels differ: an Emerald Rapids (family 6 model 207, with AMX) against the
    reference's first machine, 1e-4 relative on a policy loss of 3e-4."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""
    want = ("vendor_id", "cpu family", "model")
    fields = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in want and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    return " ".join(f"{k}={fields.get(k, '?')}" for k in want)


def tensors_digest(state: dict) -> str:
    h = hashlib.sha256()

    def visit(prefix: str, obj) -> None:
        if torch.is_tensor(obj):
            h.update(prefix.encode())
            h.update(obj.detach().cpu().contiguous().numpy().tobytes())
        elif isinstance(obj, dict):
            for k in sorted(obj, key=str):
                visit(f"{prefix}/{k}", obj[k])

    visit("", state)
    return h.hexdigest()


def golden_run(rank: int, world: int, run_dir: str) -> dict:
    from distrl import checkpoint as ckpt
    from distrl.session import run_training

    run_training(golden_config(run_dir, distributed=world > 1))
    if rank != 0:
        return {}
    path, _ = ckpt.find_latest_valid(Path(run_dir) / "checkpoints")
    state, _ = ckpt.load_checkpoint(path)
    opt = state["ppo"]["optimizer"]["state"]
    records = [
        json.loads(line)
        for line in (Path(run_dir) / "metrics.jsonl").read_text().split("\n")
        if line
    ]
    values = [{k: v for k, v in r.items() if not k.startswith(TIMING)} for r in records]
    params = torch.cat([t.reshape(-1).double() for t in state["policy"].values()])
    return {
        "policy_sha256": tensors_digest(state["policy"]),
        "optimizer_sha256": tensors_digest(opt),
        "param_sum": float(params.sum()),
        "param_sumsq": float((params * params).sum()),
        "lr": float(state["ppo"]["lr"]),
        "metrics": values,
    }
