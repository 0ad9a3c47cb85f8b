"""Bad input, table-driven: every row is refused with a ValueError that shows the numbers and a
fix, and `distrl train` turns it into exit code 2 with that message, before torchrun, a process
group or a run directory exists.

"World size larger than the work can be split into": in DD-PPO each rank steps its own
--env.num-envs, so no amount of work runs out of pieces as ranks are added. What does run out is
devices: ranks use cuda:{local_rank}, so more local ranks than visible GPUs cannot start. That row
fakes one visible GPU; `--nproc 0` and negative counts are refused as well. CPU ranks beyond the
core count are allowed (they only time-slice), see docs/reliability.md.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from distrl import session
from distrl.args import parse_train_args
from tests.helpers import QUIET, refuse_to_start, run_main

NO_RUN_DIR = "<no run dir>"
"""In a row's argv: pass no --run-dir (the others get one under tmp_path)."""

# (id, argv after `train`, substrings the message must contain, environment for the row)
TABLE = [
    (
        "batch-not-divisible",
        [
            "cartpole",
            "--env.num-envs",
            "3",
            "--agent.num-steps",
            "5",
            "--agent.num-minibatches",
            "4",
        ],
        [
            "rollout batch 3 envs x 5 steps = 15",
            "--agent.num-minibatches 4",
            "e.g. a batch of 12 or 16",
            "a minibatch count that divides 15",
        ],
        {},
    ),
    (
        "keep-no-checkpoints",
        ["cartpole", "--agent.keep-checkpoints", "0"],
        ["--agent.keep-checkpoints must be 1 or more, got 0", "leave it unset to keep them all"],
        {},
    ),
    (
        "minibatch-below-2",
        [
            "cartpole",
            "--env.num-envs",
            "2",
            "--agent.num-steps",
            "2",
            "--agent.num-minibatches",
            "4",
        ],
        ["minibatch size 4 // 4 = 1 is below 2", "raise --env.num-envs or --agent.num-steps"],
        {},
    ),
    (
        "zero-envs",
        ["cartpole", "--env.num-envs", "0"],
        ["--env.num-envs must be positive, got 0; set it to 1 or more"],
        {},
    ),
    (
        "negative-steps",
        ["cartpole", "--agent.num-steps", "-1"],
        ["--agent.num-steps must be positive, got -1; set it to 1 or more"],
        {},
    ),
    (
        "zero-epochs",
        ["cartpole", "--agent.num-epochs", "0"],
        ["--agent.num-epochs must be positive, got 0; set it to 1 or more"],
        {},
    ),
    (
        "zero-iterations",
        ["cartpole", "--agent.max-iterations", "0"],
        ["--agent.max-iterations must be positive, got 0; set it to 1 or more"],
        {},
    ),
    (
        "zero-minibatches",
        ["cartpole", "--agent.num-minibatches", "0"],
        ["--agent.num-minibatches must be positive, got 0; set it to 1 or more"],
        {},
    ),
    (
        "zero-skips",
        ["cartpole", "--agent.max-consecutive-skips", "0"],
        ["--agent.max-consecutive-skips must be positive, got 0; use e.g. 10"],
        {},
    ),
    (
        "zero-timeout",
        ["cartpole", "--dist.timeout", "0"],
        ["--dist.timeout must be positive, got 0.0; use e.g. 120"],
        {},
    ),
    (
        "negative-restarts",
        ["cartpole", "--nproc", "2", "--max-restarts", "-1"],
        ["--max-restarts must be 0 or more, got -1"],
        {},
    ),
    (
        "nnodes-without-elastic",
        ["cartpole", "--nproc", "2", "--nnodes", "2", "--master-addr", "10.0.0.1"],
        [
            "--nnodes 2 starts the ranks of --dist.strategy elastic on several machines; for "
            "allreduce use torchrun's multi-node recipe: torchrun --nnodes 2"
        ],
        {},
    ),  # fmt: skip
    (
        "node-rank-out-of-range",
        ["cartpole", "--dist.strategy", "elastic", "--nnodes", "2", "--node-rank", "2"],
        ["--node-rank 2 is not a node of --nnodes 2; give each machine its own rank 0 .. 1"],
        {},
    ),
    (
        "zero-nproc",
        ["cartpole", "--nproc", "0"],
        ["--nproc must be positive, got 0; set it to 1 or more"],
        {},
    ),
    (
        "more-ranks-than-memory",
        ["cartpole", "--nproc", "64"],
        ["--nproc 64 starts 64 ranks of about", "this machine has 2.0 GiB free", "use --nproc"],
        {"free_memory": 2 * 2**30},
    ),
    (
        "all-problems-at-once",
        ["cartpole", "--env.num-envs", "0", "--agent.num-epochs", "-3"],
        ["--env.num-envs must be positive, got 0", "--agent.num-epochs must be positive, got -3"],
        {},
    ),
    (
        "unknown-task",
        ["cartpol"],
        ["unknown task 'cartpol'", "Did you mean cartpole", "Run `distrl list`"],
        {},
    ),
    (
        "resume-missing",
        ["cartpole", "--resume", "{tmp}/nope/ckpt_00000003.pt"],
        [
            "--resume {tmp}/nope/ckpt_00000003.pt: path does not exist",
            "pass a checkpoint file (ckpt_*.pt), a run directory, or --resume auto with --run-dir",
        ],
        {},
    ),
    (
        "resume-missing-under-nproc",
        ["cartpole", "--nproc", "2", "--resume", "{tmp}/nope"],
        ["--resume {tmp}/nope: path does not exist"],
        {},
    ),
    (
        "resume-auto-without-run-dir",
        ["cartpole", "--resume", "auto", NO_RUN_DIR],
        ["--resume auto needs --run-dir", "pass the run directory"],
        {},
    ),
    (
        "more-ranks-than-gpus",
        ["cartpole", "--nproc", "4", "--device", "cuda"],
        [
            "4 processes on this machine need 4 GPUs",
            "but 1 are visible",
            "use --nproc 1",
            "--device cpu",
        ],
        {"fake_gpus": 1},
    ),
    (
        "more-ranks-than-gpus-under-torchrun",
        ["cartpole", "--distributed", "True", "--device", "cuda"],
        ["3 processes on this machine need 3 GPUs", "but 2 are visible"],
        {
            "fake_gpus": 2,
            "env": {
                "RANK": "0",
                "LOCAL_RANK": "0",
                "WORLD_SIZE": "3",
                "LOCAL_WORLD_SIZE": "3",
                "TORCHELASTIC_RUN_ID": "t",
            },
        },
    ),
]


@pytest.mark.timeout(20)
@pytest.mark.parametrize(
    ("argv", "expected", "extra"), [row[1:] for row in TABLE], ids=[row[0] for row in TABLE]
)
def test_bad_configuration_is_refused_before_anything_starts(
    argv, expected, extra, tmp_path, monkeypatch, capsys
):
    run_dir = tmp_path / "run"
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    if NO_RUN_DIR in argv:
        argv.remove(NO_RUN_DIR)
    else:
        argv += ["--run-dir", str(run_dir)]
    argv += QUIET
    expected = [e.replace("{tmp}", str(tmp_path)) for e in expected]
    for k, v in extra.get("env", {}).items():
        monkeypatch.setenv(k, v)
    if "free_memory" in extra:
        from distrl.distributed import launch

        monkeypatch.setattr(launch, "available_memory", lambda: extra["free_memory"])
    if "fake_gpus" in extra:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: extra["fake_gpus"])
    refuse_to_start(monkeypatch, "a bad configuration reached torchrun or the process group")

    # the functions raise a ValueError with the numbers and the fix ...
    with pytest.raises(ValueError) as e:
        session.check_before_start(parse_train_args(argv))
    message = str(e.value)
    for part in expected:
        assert part in message, f"{part!r} not in:\n{message}"

    # ... and the command line prints exactly that and exits 2, having started nothing
    code, out, err = run_main(["train", *argv], capsys)
    assert code == 2, out + err
    assert err == f"error: {message}\n", err
    assert "Traceback" not in out + err
    assert not run_dir.exists(), "a refused configuration created the run directory"
    assert not dist.is_initialized()
    assert list(tmp_path.iterdir()) == [], list(tmp_path.iterdir())


def test_auto_device_puts_more_ranks_than_gpus_on_cpu(monkeypatch):
    """--device auto gives each local rank its own GPU or none: two ranks on a one-GPU machine
    (`make train` on a laptop) train on CPU instead of stopping; NCCL is refused there, since
    those ranks would not be on CUDA; an explicit --device cuda is still refused."""
    from distrl.distributed import context

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert context.pick_device("auto", 0, 1) == torch.device("cuda:0")
    assert context.pick_device("auto", 1, 2) == torch.device("cpu")
    context.check_devices("auto", 2)  # no error
    context.check_backend("gloo", "auto", 2)
    with pytest.raises(ValueError, match="ranks would train on cpu"):
        context.check_backend("nccl", "auto", 2)
    with pytest.raises(ValueError, match="2 processes on this machine need 2 GPUs"):
        context.check_devices("cuda", 2)
