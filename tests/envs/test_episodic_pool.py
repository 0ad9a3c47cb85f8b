"""The subprocess pool of ``--env.vectorization async`` (``envs/episodic_pool.py``): the same bits
as the in-process env, a serial fallback when it cannot start, a failed or dead worker named in
one line, no process left behind (after ``close``, or when its parent dies), Ctrl-C ignored."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from distrl.config import EnvConfig
from distrl.envs.episodic import EpisodicSuite
from distrl.envs.episodic_pool import EnvWorkerError, EpisodicPool, split
from tests.fixtures.host_rows import Counter, pool

ROOT = Path(__file__).resolve().parents[2]


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, waiting for whoever adopted it to reap it, does not)."""
    try:
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


def compare(ours, theirs, steps: int, seed: int = 0) -> int:
    """Step both with the same random actions and restarts, asserting equal bits; the rows
    that ended."""
    gen = torch.Generator().manual_seed(seed)
    assert torch.equal(ours.reset(seed), theirs.reset(seed))
    ended = 0
    for t in range(steps):
        actions = torch.rand(ours.num_envs, ours.action_space.dim, generator=gen) * 2.4 - 1.2
        a, b = ours.step(actions), theirs.step(actions)
        for x, y in zip([*a[:4], *a[4].values()], [*b[:4], *b[4].values()], strict=True):
            assert x.dtype == y.dtype and torch.equal(x, y), f"step {t}"
        ended += int((a[2] | a[3]).sum())
        if t % 40 == 13:
            mask = torch.rand(ours.num_envs, generator=gen) < 0.5
            inits = torch.randint(ours.num_init_states, (ours.num_envs,), generator=gen)
            assert torch.equal(ours.reset_rows(mask, inits), theirs.reset_rows(mask, inits))
    return ended


def test_split_rows() -> None:
    assert split(10, 2) == [(0, 5), (5, 10)]
    assert split(7, 3) == [(0, 3), (3, 5), (5, 7)]


def test_pool_is_the_in_process_env() -> None:
    p = pool(7, 3)
    try:
        assert p.num_init_states == 7 and p.max_episode_steps == 5 and p.obs_dim == 3
        assert compare(p, Counter(0, 7), 200) > 100
    finally:
        p.close()


@pytest.fixture(scope="module")
def metaworld():
    return pytest.importorskip("metaworld")


@pytest.mark.parametrize(("task", "reward"), [("push-v3", "success"), ("mixed", "dense")])
def test_meta_world_pool_is_bitwise_the_in_process_env(metaworld, task, reward) -> None:
    """A few hundred steps with auto-resets (40-step episodes; success ends some), restarts of
    chosen rows and a reseeded reset: every tensor and info entry the same."""
    from distrl.envs.meta_world import MT10_TASKS, MetaWorldMT10, make_mt10

    tasks = [MT10_TASKS[i % 10] for i in range(5)] if task == "mixed" else task
    kw = {"max_episode_steps": 40, "reward": reward}
    p = make_mt10(tasks, 5, vectorization="async", num_workers=2, **kw)
    assert isinstance(p, EpisodicPool)
    serial = MetaWorldMT10(tasks, 5, **kw)
    try:
        assert (p.obs_dim, p.num_init_states, p.max_episode_steps) == (49, 50, 40)
        assert compare(p, serial, 200) >= 20
        assert compare(p, serial, 45, seed=3) >= 1
    finally:
        p.close()
        serial.close()


def test_a_pool_that_cannot_start_warns_once_and_steps_in_process(metaworld) -> None:
    from distrl.envs.meta_world import MetaWorldMT10, make_mt10

    with pytest.warns(UserWarning) as caught:
        env = make_mt10("reach-v3", 2, vectorization="async", start_method="no-such-method")
    assert len(caught) == 1
    text = str(caught[0].message)
    assert "\n" not in text and "could not start (ValueError: cannot find context for " \
        "'no-such-method'); stepping its envs in this process" in text, text  # fmt: skip
    assert type(env) is MetaWorldMT10
    env.close()


def test_sync_stays_in_process_and_the_suite_passes_the_flags(metaworld) -> None:
    from distrl.envs.meta_world import MetaWorldMT10
    from distrl.envs.registry import get_task

    suite = get_task("metaworld-mt10").suite
    assert suite is not None and suite.pooled
    env = suite.make_training_env("reach-v3", 2, torch.device("cpu"), EnvConfig())
    assert type(env) is MetaWorldMT10
    env.close()
    asked = {}
    spy = EpisodicSuite(("t",), lambda *a, **kw: asked.update(kw), pooled=True)
    spy.make_training_env("t", 2, torch.device("cpu"), EnvConfig(vectorization="async"))
    assert asked == {"vectorization": "async", "num_workers": 0}


def test_a_worker_that_raises_is_named_in_one_line() -> None:
    p = pool(4, 2, fail_at=3)
    try:
        p.step(torch.zeros(4, 1))
        p.step(torch.zeros(4, 1))
        with pytest.raises(EnvWorkerError) as e:
            p.step(torch.zeros(4, 1))
        pid = p.procs[0].pid
        assert str(e.value) == (
            f"env worker 0 of 2 (rows 0..1, pid {pid}) raised ValueError: step 3 of the fixture"
        )
    finally:
        p.close()


def test_a_dead_worker_is_named_not_waited_for() -> None:
    p = pool(5, 2)
    try:
        p.step(torch.zeros(5, 1))
        pid = p.procs[1].pid
        os.kill(pid, signal.SIGKILL)
        t0 = time.monotonic()
        with pytest.raises(EnvWorkerError) as e:
            for _ in range(3):  # (the kill may land after the first command is sent)
                p.step(torch.zeros(5, 1))
        assert time.monotonic() - t0 < 5
        assert str(e.value).startswith(f"env worker 1 of 2 (rows 3..4, pid {pid}) ")
        assert str(e.value).endswith("(killed by SIGKILL)"), e.value
    finally:
        p.close()
    assert not alive(pid)


def test_workers_ignore_ctrl_c_and_close_leaves_no_process() -> None:
    p = pool(4, 2)
    pids = [proc.pid for proc in p.procs]
    for pid in pids:
        os.kill(pid, signal.SIGINT)  # a terminal's Ctrl-C reaches them too
    p.step(torch.zeros(4, 1))
    p.close()
    assert not any(alive(pid) for pid in pids)
    assert p.procs == [] and p.conns == []


@pytest.mark.long  # a Python process started per start method: ~5 s each
@pytest.mark.timeout(60)
@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
def test_workers_follow_a_parent_that_is_killed(method) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    cmd = [sys.executable, "-m", "tests.fixtures.host_rows", method]
    parent = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    pids = [int(p) for p in parent.stdout.readline().split()]
    assert len(pids) == 2 and all(alive(p) for p in pids)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(p) for p in pids)


def test_num_workers_out_of_range_is_refused() -> None:
    from distrl.config import TrainConfig, validate

    with pytest.raises(ValueError, match=r"--env.num-workers must be in 0\.\.4"):
        validate(TrainConfig(env=EnvConfig(num_envs=4, num_workers=5)))
    with pytest.raises(ValueError, match=r"--env.num-workers must be in 1\.\.3"):
        pool(3, 4)


def test_actions_reach_the_rows_in_order() -> None:
    p = pool(5, 2)
    try:
        acts = torch.linspace(-0.5, 0.5, 5).unsqueeze(1)
        _, reward, *_ = p.step(acts)
        assert torch.equal(reward, acts[:, 0]) and np.array_equal(p.obs_rows[:, 0], np.arange(5))
    finally:
        p.close()


def test_async_is_taken_by_the_meta_world_tasks_and_refused_by_torch_ones(metaworld) -> None:
    from distrl.config import TrainConfig
    from distrl.envs.registry import check_config

    for task in ("metaworld-mt10", "metaworld-mt10-ppo"):
        check_config(TrainConfig(task=task, env=EnvConfig(vectorization="async")))
    with pytest.raises(ValueError, match="so do metaworld-mt10 and metaworld-mt10-ppo"):
        check_config(TrainConfig(task="reach10", env=EnvConfig(vectorization="async")))


@pytest.mark.long  # two ranks, each building MT10 and two pools of 2 workers: ~60-90 s
@pytest.mark.timeout(300)
def test_metaworld_trains_on_two_ranks_with_pooled_envs(metaworld, tmp_path) -> None:
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "distrl.cli", "train", "metaworld-mt10", "--nproc", "2"]
    cmd += ["--env.vectorization", "async", "--env.num-workers", "2"]
    cmd += ["--agent.max-iterations", "2", "--env.max-episode-steps", "50"]
    cmd += ["--run-dir", str(run), "--progress", "False", "--tensorboard", "False"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "could not start" not in proc.stderr, proc.stderr[-3000:]
    lines = (run / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2, lines
