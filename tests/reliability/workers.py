"""Functions run inside spawned ranks (tests/distributed/harness.py), importable by module name
for the spawn start method, and the helpers shared by the reliability tests."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import torch

from distrl.config import AgentConfig, DistConfig, EnvConfig, TrainConfig

BIN = Path(sys.executable).parent


def tiny_config(
    task: str,
    run_dir: str | None,
    distributed: bool,
    timeout: float = 15.0,
    check_finite: bool = True,
    **agent,
) -> TrainConfig:
    a = dict(num_steps=8, num_epochs=2, num_minibatches=2, max_iterations=4, save_interval=1)
    a.update(agent)
    return TrainConfig(
        task=task,
        env=EnvConfig(num_envs=8, check_finite=check_finite),
        agent=AgentConfig(**a),
        dist=DistConfig(timeout=timeout),
        distributed=distributed,
        run_dir=run_dir,
        tensorboard=False,
        progress=False,
        threads=1,
    )


# ---- ranks in processes forked from a server that has imported torch once ---------------------

_PRELOAD = [
    "tests.reliability.workers",
    "distrl.cli",
    "distrl.runner.on_policy",
    "distrl.distributed.allreduce",
    "distrl.envs.registry",
    "tests.fixtures.faulty",
    "distrl.telemetry",
    "torch.distributed",
]


def run_group(fn, world: int, *args, timeout: float):
    """``tests.distributed.harness.run_ranks`` with ranks forked from a server that imported
    torch and distrl once (seconds saved per rank)."""
    from tests.distributed.harness import run_ranks

    return run_ranks(fn, world, *args, timeout=timeout, start_method="forkserver", preload=_PRELOAD)


def _report(path: str, rank: int, e: BaseException | None, t0: float, **extra) -> None:
    cause = None if e is None else e.__cause__
    with open(f"{path}.{rank}.json", "w") as f:
        json.dump(
            {
                "type": None if e is None else type(e).__name__,
                "error": None if e is None else str(e),
                "cause_type": None if cause is None else type(cause).__name__,
                "cause": None if cause is None else str(cause),
                "cause_env_index": getattr(cause, "env_index", None),
                "seconds": time.monotonic() - t0,
                **extra,
            },
            f,
        )


def faulty_train(
    rank: int, world: int, faults: str, run_dir: str, timeout: float, report: str
) -> dict:
    """``run_training`` on ``faulty-cartpole`` (tests.fixtures.faulty) with
    ``DISTRL_FAULTS=faults``; writes ``{report}.{rank}.json`` (what it raised, its cause,
    seconds) and re-raises."""
    import tests.fixtures.faulty  # noqa: F401 (registers faulty-cartpole)
    from distrl.session import run_training

    os.environ["DISTRL_FAULTS"] = faults  # parse_faults reads RANK (set by the harness)
    cfg = tiny_config(
        "faulty-cartpole", run_dir, distributed=world > 1, timeout=timeout, max_iterations=6
    )
    t0 = time.monotonic()
    try:
        final = run_training(cfg)
    except BaseException as e:
        _report(report, rank, e, t0)
        raise
    _report(report, rank, None, t0)
    return {"iteration": final.get("iteration")}


def poisoned_rewards(
    rank: int, world: int, run_dir: str, poison: list[int], max_skips: int
) -> dict:
    """Rank 1's rewards become NaN after the rollout of the iterations in ``poison`` (the env
    check is off, advantages are not normalized: rank 0's own loss stays finite). Returns each
    rank's per-iteration skip counts and parameters, and what stopped training."""
    from distrl import Hooks
    from distrl.algorithms.ppo import NonFiniteError
    from distrl.session import run_training

    history: list[dict] = []

    class Poison(Hooks):
        def before_update(self, runner) -> None:
            if rank == 1 and runner.iteration in poison:
                runner.buffer.rewards.fill_(float("nan"))

        def after_update(self, runner, m) -> None:
            history.append(
                {
                    "iteration": runner.iteration,
                    "skipped": m["train/skipped_updates"],
                    "skipped_total": runner.ppo.skipped_total,
                    "params": torch.cat(
                        [p.detach().reshape(-1) for p in runner.policy.parameters()]
                    ),
                }
            )

    cfg = tiny_config(
        "cartpole",
        run_dir,
        distributed=world > 1,
        check_finite=False,
        max_iterations=6,
        norm_adv=False,
        max_consecutive_skips=max_skips,
    )
    error = None
    try:
        run_training(cfg, hooks=[Poison()])
    except NonFiniteError as e:
        error = str(e)
    return {"history": history, "error": error}


# ---- the real command line in a subprocess ------------------------------------------------


def cli_env(**extra: str) -> dict[str, str]:
    """The shared CLI subprocess environment (tests.distributed.workers.cli_env)."""
    from tests.distributed.workers import cli_env as shared

    return shared(**extra)


def run_cli(cmd: list[str], timeout: float, **env: str) -> tuple[int, str, str, float]:
    """The shared CLI runner (tests.distributed.workers.run_cli) with extra env variables."""
    from tests.distributed.workers import run_cli as shared

    return shared(cmd, timeout, **env)


def with_config(cfg: TrainConfig, **sub) -> TrainConfig:
    """``cfg`` with fields of its sub-configs replaced: with_config(cfg, agent={...})."""
    for k, v in sub.items():
        cfg = dataclasses.replace(cfg, **{k: dataclasses.replace(getattr(cfg, k), **v)})
    return cfg


def cli_rank(rank: int, world: int, argv: list[str]) -> int:
    """What a rank started by `distrl train --nproc N` does with its argv (the launcher adds
    ``--distributed True --run-dir D``): parse it, then ``run_training``."""
    from distrl.args import parse_train_args
    from distrl.session import run_training

    return run_training(parse_train_args(argv))["iteration"]
