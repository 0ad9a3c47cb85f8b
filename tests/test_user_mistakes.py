"""A newcomer's ordinary mistakes, table-driven: each is refused with `error: <message naming the
value and the fix>` on stderr and exit code 2, before torchrun, a process group or a run
directory exists, and with no traceback (docs/troubleshooting.md lists the same rows).

The rows run `distrl.cli.main` in process. What the machine has is faked per row where the
mistake depends on it: torchrun's environment variables, a package that is not installed
(``sys.modules[name] = None`` makes ``importlib.util.find_spec`` report it missing), a CPU-only or
a two-GPU torch. The Python API refuses the same mistakes with a ValueError (last test); one slow
test starts real torchrun ranks without ``--distributed True``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import gymnasium
import numpy as np
import pytest
import torch
import torch.distributed as dist
from gymnasium import spaces

import distrl
from distrl import cli, session
from distrl.args import parse_train_args
from tests.helpers import QUIET, refuse_to_start, run_main

TORCHRUN_RANK_0_OF_2 = {
    "RANK": "0",
    "LOCAL_RANK": "0",
    "WORLD_SIZE": "2",
    "LOCAL_WORLD_SIZE": "2",
    "TORCHELASTIC_RUN_ID": "test",
}


class _SpaceEnv(gymnasium.Env):
    """A one-step env with the given spaces: Gymnasium spaces distrl cannot step."""

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space) -> None:
        self.observation_space, self.action_space = observation_space, action_space

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, True, False, {}


_BOX = spaces.Box(-1.0, 1.0, (3,), np.float32)
for env_id, obs_space, act_space in (
    (
        "distrl-test/DictTupleObs-v0",
        spaces.Dict({"pos": _BOX, "pair": spaces.Tuple((spaces.Discrete(2), spaces.Discrete(3)))}),
        spaces.Discrete(2),
    ),
    ("distrl-test/MatrixAct-v0", _BOX, spaces.Box(-1.0, 1.0, (2, 2), np.float32)),
):
    if env_id not in gymnasium.registry:
        gymnasium.register(
            env_id,
            entry_point=lambda o=obs_space, a=act_space: _SpaceEnv(o, a),
            max_episode_steps=10,
        )


def _old_run(tmp: Path) -> None:
    """A run directory that already holds a run: metrics up to iteration 3."""
    run = tmp / "old"
    run.mkdir()
    lines = [json.dumps({"iteration": i, "env_steps": 64 * i}) for i in (1, 2, 3)]
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")


def _no_checkpoint_dir(tmp: Path) -> None:
    (tmp / "empty").mkdir()


# (id, argv after `distrl`, substring of the message, what to fake for the row)
# The fakes: env (environment variables), missing (modules that are not installed), cuda
# (False: a CPU-only torch; N: N GPUs), make (prepares tmp_path), tyro (tyro's own boxed
# message instead of `error: ...`). `{tmp}` is the test's tmp_path.
TABLE: list[tuple[str, list[str], str, dict]] = [
    # 1. torchrun ranks without --distributed True
    (
        "torchrun-without-distributed",
        ["train", "cartpole"],
        "started by torchrun (WORLD_SIZE=2) but --distributed is False: every rank would train "
        "alone into the same run directory; add --distributed True",
        {"env": TORCHRUN_RANK_0_OF_2},
    ),
    # 2. --distributed True without torchrun
    (
        "distributed-without-torchrun",
        ["train", "cartpole", "--distributed", "True"],
        "was not started by torchrun (no RANK/WORLD_SIZE/LOCAL_RANK in the environment); use "
        "distrl train cartpole --nproc N",
        {},
    ),
    # 3. --wandb without wandb
    (
        "wandb-not-installed",
        ["train", "cartpole", "--wandb", "True"],
        "--wandb True needs the Weights & Biases client, which is not installed. Install it with "
        "`pip install -c constraints.txt -e '.[wandb]'` (or `pip install wandb`)",
        {"missing": ["wandb"]},
    ),
    # 4. a MuJoCo task without the mujoco extra
    (
        "mujoco-not-installed",
        ["train", "halfcheetah"],
        "task halfcheetah needs the mujoco extra, which is not installed: make setup-mujoco, or "
        "pip install -c constraints.txt -e '.[mujoco]'",
        {"missing": ["mujoco"]},
    ),
    # 5. Gymnasium spaces distrl cannot step
    (
        "gym-tuple-observation",
        ["train", "gym:Blackjack-v1"],
        "gym:Blackjack-v1 has observation space Tuple(Discrete(32), Discrete(11), Discrete(2)); "
        "distrl needs a Box observation",
        {},
    ),
    (
        "gym-dict-observation-with-a-tuple",
        ["train", "gym:distrl-test/DictTupleObs-v0"],
        "gym:distrl-test/DictTupleObs-v0 has observation key 'pair' of space Tuple(Discrete(2), "
        "Discrete(3)); distrl takes Dict keys that are Box (images or vectors), Discrete, "
        "MultiDiscrete or MultiBinary: flatten that key",
        {},
    ),
    (
        "gym-matrix-action",
        ["train", "gym:distrl-test/MatrixAct-v0"],
        "has action space Box(-1.0, 1.0, (2, 2), float32); distrl supports Discrete, "
        "MultiDiscrete and MultiBinary with 1-D shapes, and 1-D Box actions: wrap the env",
        {},
    ),
    (
        "gym-unknown-id",
        ["train", "gym:CartPole-v0x"],
        "unknown Gymnasium id 'CartPole-v0x'. Did you mean gym:CartPole-v0",
        {},
    ),
    # 6. NCCL on CPU
    (
        "nccl-on-cpu",
        ["train", "cartpole", "--dist.backend", "nccl", "--device", "cpu"],
        "--dist.backend nccl needs CUDA devices, but the ranks would train on cpu (--device cpu); "
        "use --dist.backend gloo, or auto",
        {},
    ),
    # 7. --multitask.tasks
    (
        "multitask-suite-name-as-task",
        ["train", "reach10", "--multitask.tasks", "reach10"],
        "--multitask.tasks: reach10 not in this suite; its tasks are reach-east, reach-west",
        {},
    ),
    (
        "multitask-typo",
        ["train", "reach10", "--multitask.tasks", "reach-est"],
        "reach-est (did you mean reach-west or reach-east",
        {},
    ),
    (
        "multitask-on-a-single-task",
        ["train", "cartpole", "--multitask.tasks", "reach-east"],
        "--multitask.tasks applies to the episodic suites (reach10, metaworld-mt10), not to "
        "cartpole",
        {},
    ),
    # 8. devices
    (
        "cuda-on-cpu-torch",
        ["train", "cartpole", "--device", "cuda"],
        "--device cuda: this torch build",
        {"cuda": False},
    ),
    (
        "cuda-on-cpu-torch-lists-devices",
        ["train", "cartpole", "--device", "cuda"],
        "has no CUDA support; use one of: auto, cpu",
        {"cuda": False},
    ),
    (
        "device-gpu",
        ["train", "cartpole", "--device", "gpu"],
        "--device 'gpu' is not a torch device; use one of: auto, cpu",
        {"cuda": False},
    ),
    (
        "device-index-beyond-gpus",
        ["train", "cartpole", "--device", "cuda:7"],
        "--device cuda:7: this machine has 2 visible GPU(s); use one of: auto, cpu, cuda:0, cuda:1",
        {"cuda": 2},
    ),
    # 9. numbers out of range (config.validate)
    (
        "max-grad-norm-negative",
        ["train", "cartpole", "--agent.max-grad-norm", "-1"],
        "--agent.max-grad-norm must be positive, got -1.0; use e.g. 0.5 or 1.0",
        {},
    ),
    (
        "learning-rate-nan",
        ["train", "cartpole", "--agent.learning-rate", "nan"],
        "--agent.learning-rate must be a finite number, got nan; use e.g. 3e-4",
        {},
    ),
    (
        "learning-rate-zero",
        ["train", "cartpole", "--agent.learning-rate", "0"],
        "--agent.learning-rate must be positive, got 0.0",
        {},
    ),
    (
        "gamma-above-1",
        ["train", "cartpole", "--agent.gamma", "1.5"],
        "--agent.gamma must be in (0, 1], got 1.5",
        {},
    ),
    (
        "gae-lambda-negative",
        ["train", "cartpole", "--agent.gae-lambda", "-0.1"],
        "--agent.gae-lambda must be in [0, 1], got -0.1; use e.g. 0.95",
        {},
    ),
    (
        "clip-coef-zero",
        ["train", "cartpole", "--agent.clip-coef", "0"],
        "--agent.clip-coef must be positive, got 0.0; use e.g. 0.2",
        {},
    ),
    (
        "adam-eps-zero",
        ["train", "cartpole", "--agent.adam-eps", "0"],
        "--agent.adam-eps must be positive, got 0.0; use e.g. 1e-5",
        {},
    ),
    (
        "desired-kl-zero",
        ["train", "cartpole", "--agent.desired-kl", "0"],
        "--agent.desired-kl must be positive, got 0.0",
        {},
    ),
    (
        "ent-coef-negative",
        ["train", "cartpole", "--agent.ent-coef", "-0.01"],
        "--agent.ent-coef must be 0 or more (and finite), got -0.01",
        {},
    ),
    (
        "vf-coef-negative",
        ["train", "cartpole", "--agent.vf-coef", "-1"],
        "--agent.vf-coef must be 0 or more (and finite), got -1.0",
        {},
    ),
    (
        "hidden-width-zero",
        ["train", "cartpole", "--policy.actor-hidden", "64", "0"],
        "--policy.actor-hidden widths must be 1 or more, got 64 0",
        {},
    ),
    (
        "init-log-std-inf",
        ["train", "pendulum", "--policy.init-log-std", "inf"],
        "--policy.init-log-std must be finite, got inf",
        {},
    ),
    (
        "save-interval-zero",
        ["train", "cartpole", "--agent.save-interval", "0"],
        "--agent.save-interval must be positive, got 0; set it to 1 or more",
        {},
    ),
    (
        "minibatches-not-dividing",
        ["train", "cartpole", "--env.num-envs", "3", "--agent.num-minibatches", "5"],
        "rollout batch 3 envs x 32 steps = 96 is not divisible by --agent.num-minibatches 5",
        {},
    ),
    (
        "num-envs-zero",
        ["train", "cartpole", "--env.num-envs", "0"],
        "--env.num-envs must be positive, got 0; set it to 1 or more",
        {},
    ),
    (
        "nproc-zero",
        ["train", "cartpole", "--nproc", "0"],
        "--nproc must be positive, got 0",
        {},
    ),
    (
        "threads-zero",
        ["train", "cartpole", "--threads", "0"],
        "--threads must be positive, got 0",
        {},
    ),
    # 10. --max-restarts with one process
    (
        "max-restarts-without-nproc",
        ["train", "cartpole", "--max-restarts", "2"],
        "--max-restarts 2 restarts the ranks that --nproc N starts under torchrun",
        {},
    ),
    # 11. a run directory that already holds a run
    (
        "run-dir-holds-a-run",
        ["train", "cartpole", "--run-dir", "{tmp}/old"],
        "run dir {tmp}/old already holds a run (iteration 3); pass --resume auto to continue it "
        "or choose a new --run-dir",
        {"make": _old_run},
    ),
    (
        "run-dir-holds-a-run-under-nproc",
        ["train", "cartpole", "--nproc", "2", "--max-restarts", "1", "--run-dir", "{tmp}/old"],
        "run dir {tmp}/old already holds a run (iteration 3)",
        {"make": _old_run},
    ),
    (
        "run-dir-is-a-file",
        ["train", "cartpole", "--run-dir", "{tmp}/notes.txt"],
        "--run-dir {tmp}/notes.txt is a file; pass a directory",
        {"make": lambda tmp: (tmp / "notes.txt").write_text("x")},
    ),
    # 12. play
    (
        "play-missing-path",
        ["play", "{tmp}/nope"],
        "checkpoint {tmp}/nope: does not exist",
        {},
    ),
    (
        "play-dir-without-checkpoint",
        ["play", "{tmp}/empty"],
        "no checkpoints to resume from: expected ckpt_[0-9]*.pt files in {tmp}/empty/checkpoints",
        {"make": _no_checkpoint_dir},
    ),
    (
        "play-zero-episodes",
        ["play", "{tmp}/empty", "--episodes", "0"],
        "--episodes must be at least 1, got 0",
        {"make": _no_checkpoint_dir},
    ),
    (
        "play-zero-envs",
        ["play", "{tmp}/empty", "--num-envs", "0"],
        "--num-envs must be at least 1, got 0",
        {"make": _no_checkpoint_dir},
    ),
    (
        "play-device-gpu",
        ["play", "{tmp}/empty", "--device", "gpu"],
        "--device 'gpu' is not a torch device",
        {"make": _no_checkpoint_dir},
    ),
    # 13. others a newcomer meets
    (
        "unknown-task",
        ["train", "cartpol"],
        "unknown task 'cartpol'. Did you mean cartpole",
        {},
    ),
    (
        "no-task",
        ["train"],
        "usage: train <task> [overrides]; `distrl list` shows the tasks",
        {},
    ),
    (
        "unregistered-network",
        ["train", "cartpole", "--policy.network", "transformer"],
        "--policy.network 'transformer' is not registered in this process "
        "(known: mlp, nature-cnn, minatar-cnn, multi-input)",
        {},
    ),
    (
        "config-file-missing",
        ["train", "--config", "{tmp}/config.yaml"],
        "--config {tmp}/config.yaml: no such file",
        {},
    ),
    (
        "value-not-a-number",
        ["train", "cartpole", "--agent.learning-rate", "abc"],
        "Error parsing --agent.learning-rate",
        {"tyro": True},
    ),
    (
        "bench-unknown-option",
        ["bench", "throughput", "--bogus", "1"],
        "Unrecognized options: --bogus",
        {"tyro": True},
    ),
    (
        "unknown-command",
        ["trian", "cartpole"],
        "unknown command 'trian'",
        {},
    ),
]


def _fake(monkeypatch, tmp_path: Path, fakes: dict) -> None:
    """Apply a row's fakes (see TABLE)."""
    for key, value in fakes.get("env", {}).items():
        monkeypatch.setenv(key, value)
    for name in fakes.get("missing", []):
        monkeypatch.setitem(sys.modules, name, None)
    if "cuda" in fakes:
        gpus = fakes["cuda"] or 0
        monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
        if not gpus:
            monkeypatch.setattr(torch.version, "cuda", None)
    if "make" in fakes:
        fakes["make"](tmp_path)


def _tree(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in sorted(root.rglob("*"))}


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("argv", "expected", "fakes"), [row[1:] for row in TABLE], ids=[row[0] for row in TABLE]
)
def test_mistake_is_refused_before_anything_starts(
    argv, expected, fakes, tmp_path, monkeypatch, capsys
):
    for key in TORCHRUN_RANK_0_OF_2:  # not under torchrun unless the row says so
        monkeypatch.delenv(key, raising=False)
    _fake(monkeypatch, tmp_path, fakes)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    expected = expected.replace("{tmp}", str(tmp_path))
    run_dir = tmp_path / "run"
    if argv[0] == "train" and len(argv) > 1:
        if "--run-dir" not in argv:
            argv += ["--run-dir", str(run_dir)]
        at = 1 if argv[1].startswith("-") else 2  # QUIET first: the row's own flags win
        argv[at:at] = QUIET
    monkeypatch.chdir(tmp_path)  # a default runs/<task>/<time> would land here, and be seen
    before = _tree(tmp_path)
    refuse_to_start(monkeypatch, "a mistake reached torchrun or the process group")

    def no_training(cfg):
        raise AssertionError("a mistake reached run_training")

    monkeypatch.setattr(session, "run_training", no_training)

    code, out, err = run_main(argv, capsys)

    assert code == 2, out + err
    assert expected in err, f"{expected!r} not in:\n{err}"
    assert "Traceback" not in out + err
    if not fakes.get("tyro"):
        assert err.startswith("error: "), err
    assert not run_dir.exists(), "a refused command created the run directory"
    assert _tree(tmp_path) == before, "a refused command wrote files"
    assert not dist.is_initialized()


# (id, distrl.train arguments, substring of the ValueError, fakes as in TABLE)
API_TABLE: list[tuple[str, dict, str, dict]] = [
    (
        "distributed-without-torchrun",
        {"distributed": True},
        "distributed=True but this process was not started by torchrun",
        {},
    ),
    (
        "max-grad-norm-negative",
        {"agent": {"max_grad_norm": -1.0}},
        "--agent.max-grad-norm must be positive, got -1.0",
        {},
    ),
    ("device-gpu", {"device": "gpu"}, "--device 'gpu' is not a torch device", {"cuda": False}),
    (
        "nccl-on-cpu",
        {"device": "cpu", "dist": {"backend": "nccl"}},
        "--dist.backend nccl needs CUDA devices",
        {},
    ),
    (
        "wandb-not-installed",
        {"wandb": True},
        "`pip install wandb`",
        {"missing": ["wandb"]},
    ),
    (
        "max-restarts-without-nproc",
        {"max_restarts": 1},
        "--max-restarts 1 restarts the ranks that --nproc N starts",
        {},
    ),
    (
        "run-dir-holds-a-run",
        {"run_dir": "{tmp}/old"},
        "run dir {tmp}/old already holds a run (iteration 3)",
        {"make": _old_run},
    ),
    (
        "multitask-on-a-single-task",
        {"multitask": {"tasks": ["reach-east"]}},
        "--multitask.tasks applies to the episodic suites",
        {},
    ),
]


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("overrides", "expected", "fakes"),
    [row[1:] for row in API_TABLE],
    ids=[row[0] for row in API_TABLE],
)
def test_api_refuses_the_same_mistakes(overrides, expected, fakes, tmp_path, monkeypatch):
    for key in TORCHRUN_RANK_0_OF_2:
        monkeypatch.delenv(key, raising=False)
    _fake(monkeypatch, tmp_path, fakes)
    overrides = {
        k: v.replace("{tmp}", str(tmp_path)) if isinstance(v, str) else v
        for k, v in overrides.items()
    }
    overrides.setdefault("run_dir", str(tmp_path / "run"))
    monkeypatch.chdir(tmp_path)
    before = _tree(tmp_path)
    refuse_to_start(monkeypatch, "a mistake reached torchrun or the process group")
    monkeypatch.setattr(session, "run_training", lambda cfg: pytest.fail("reached run_training"))

    with pytest.raises(ValueError) as e:
        distrl.train("cartpole", progress=False, tensorboard=False, **overrides)

    assert expected.replace("{tmp}", str(tmp_path)) in str(e.value)
    assert _tree(tmp_path) == before


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_torchrun_ranks_without_distributed_exit_fast_with_the_message(tmp_path):
    """Mistake 1 under real torchrun: both ranks print the message and exit 2, in seconds."""
    distrl_bin = str(Path(sys.executable).parent / "distrl")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        # torchrun looks at its ranks every 10 s, so both have printed and exited by the first
        # look (each takes a few seconds); a shorter look would stop the slower rank first
        "--monitor-interval=10",
        "--no_python",
        distrl_bin,
        "train",
        "cartpole",
        "--agent.max-iterations",
        "1",
        "--env.num-envs",
        "16",
        "--run-dir",
        str(tmp_path / "run"),
        *QUIET,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for key in TORCHRUN_RANK_0_OF_2:
        env.pop(key, None)
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=80, env=env)
    seconds = time.monotonic() - start
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    message = "error: this process was started by torchrun (WORLD_SIZE=2) but --distributed is"
    assert output.count(message) == 2, output  # one line from each rank
    assert output.count("exitcode  : 2") == 2, output  # torchrun's report of each rank
    assert seconds < 60, f"{seconds:.1f} s"
    assert not (tmp_path / "run").exists()


def test_an_empty_or_new_run_dir_is_free(tmp_path, monkeypatch):
    """The run-directory check refuses only a directory that holds a run."""
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    (tmp_path / "empty").mkdir()
    (tmp_path / "started").mkdir()
    (tmp_path / "started" / "config.yaml").write_text("task: cartpole\n")  # no iteration yet
    for run_dir in ("empty", "new", "started"):
        cfg = parse_train_args(["cartpole", "--run-dir", str(tmp_path / run_dir), *QUIET])
        session.check_before_start(cfg)  # does not raise
    _old_run(tmp_path)
    cfg = parse_train_args(["cartpole", "--run-dir", str(tmp_path / "old"), "--resume", "auto"])
    session.check_before_start(cfg)  # continuing the run is what --resume auto is for


def test_max_restarts_makes_the_launched_ranks_resume(tmp_path, monkeypatch):
    """`--nproc N --max-restarts R` without --resume: the ranks get --resume auto, so that a
    restart continues from the newest checkpoint instead of training from scratch."""
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    from distrl.distributed import launch

    started: list[tuple[int, int, list[str]]] = []
    monkeypatch.setattr(
        launch, "launch", lambda n, r, args, *rest: started.append((n, r, args)) or 0
    )
    base = ["train", "cartpole", "--nproc", "2", "--run-dir", str(tmp_path / "run"), *QUIET]
    assert cli.main([*base, "--max-restarts", "1"]) == 0
    assert cli.main(base) == 0
    (n, restarts, args), (_, no_restarts, plain) = started
    assert (n, restarts, no_restarts) == (2, 1, 0)
    assert args[-2:] == ["--resume", "auto"], args
    assert "--resume" not in plain, plain
