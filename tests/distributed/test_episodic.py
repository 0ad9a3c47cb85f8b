"""The episodic multi-task runner on real Gloo ranks (multi-task RLOO sharding, RIPT): every
(tasks, ranks) combination runs without a hang, each rank trains its shard's tasks in cursor
order on exactly ``data_batch_size`` episodes from circular init states, replicas stay
identical, the early-stop counter is agreed, and a resume equals an uninterrupted run bit for
bit."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from distrl import checkpoint as ckpt
from distrl.algorithms.task_schedule import task_at
from distrl.config import MultiTaskConfig
from distrl.envs.reach import NUM_INIT_STATES
from distrl.telemetry import read_metrics
from tests.distributed.episodic_workers import episodic_run, episodic_train
from tests.distributed.harness import expect_ok, run_ranks
from tests.distributed.workers import run_cli
from tests.helpers import TIMING_KEYS, assert_same

PRELOAD = ["torch", "distrl.runner.episodic", "tests.distributed.episodic_workers"]
BATCH, K = 8, 4


def ranks(world: int, *args, timeout: float = 90.0) -> list[dict]:
    results, codes, _ = run_ranks(
        episodic_run, world, *args, timeout=timeout, start_method="forkserver", preload=PRELOAD
    )
    return expect_ok(results, codes, world)


AGREED = ("success", "success/suite", "rloo/dropped_groups", "rloo/kept_episodes", "episodes")


@pytest.mark.slow  # 12 rank groups: ~35 s (test-fast keeps the 9-tasks-on-2-ranks case below)
@pytest.mark.timeout(120)
@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("num_tasks", [1, 2, 3, 9])
def test_every_tasks_ranks_combination_runs_two_iterations(num_tasks: int, world: int) -> None:
    out = ranks(world, num_tasks, 2, {})
    for rank, r in enumerate(out):
        assert r["iteration"] == 2
        assert [s["iteration"] for s in r["seen"]] == [0, 1]
        for it, s in enumerate(r["seen"]):
            # the shard's task in cursor order; exactly data_batch_size episodes
            assert s["task"] == task_at(rank, it, num_tasks, world)
            assert s["episodes"] == BATCH
            m = s["metrics"]
            total = sum(
                v for k, v in m.items() if k.startswith("task/") and k.endswith("/episodes")
            )
            assert total == m["episodes"] == BATCH * world
            shares = [v for k, v in m.items() if k.endswith("/grad_share")]
            assert sum(shares) == pytest.approx(1.0 if m["rloo/kept_episodes"] else 0.0)
    # replicas identical; every agreed number the same on every rank
    for r in out[1:]:
        assert torch.equal(r["params"], out[0]["params"])
        assert torch.equal(r["buffers"], out[0]["buffers"])
        assert torch.equal(r["optimizer"], out[0]["optimizer"])
        for a, b in zip(r["seen"], out[0]["seen"], strict=True):
            assert {k: a["metrics"][k] for k in AGREED} == {k: b["metrics"][k] for k in AGREED}


@pytest.mark.timeout(120)
def test_nine_tasks_two_ranks_follow_ript() -> None:
    """Shards [0,2,4,6,8] / [1,3,5,7]; 6 iterations in cursor order; each task's init states
    continue circularly where its previous visit stopped (2 states per visit, K=4 each)."""
    out = ranks(2, 9, 6, {})
    assert [s["task"] for s in out[0]["seen"]] == [0, 2, 4, 6, 8, 0]
    assert [s["task"] for s in out[1]["seen"]] == [1, 3, 5, 7, 1, 3]
    per_visit = BATCH // K
    for r in out:
        visits: dict[int, int] = {}
        for s in r["seen"]:
            v = visits.get(s["task"], 0)
            visits[s["task"]] = v + 1
            starts = [(v * per_visit + i) % NUM_INIT_STATES for i in range(per_visit)]
            assert s["init"] == [i for i in starts for _ in range(K)]


@pytest.mark.timeout(120)
def test_skip_solved_trains_the_unsolved_tasks_on_agreed_numbers() -> None:
    """--multitask.skip-solved 0.05: 5 tasks on 2 ranks (shards [0, 2, 4] and [1, 3]). Every
    rank's sequence of tasks is the one its cursor gives from the agreed latest successes (a
    task at or above 0.05 is passed over until it has waited 3 iterations), some tasks are
    skipped (the sequence is not the plain cycle), and the ranks end with the same weights
    (learn() verifies the replicas)."""
    from distrl.algorithms.task_schedule import TaskCursor, task_shard
    from distrl.envs.reach import TASK_NAMES

    mt = {"skip_solved": 0.05, "solved_revisit": 3, "data_batch_size": 16}
    out = ranks(2, 5, 10, mt)
    assert out[0]["params"].equal(out[1]["params"])
    names = TASK_NAMES[:5]
    skipped = False
    for rank, r in enumerate(out):
        cursor, latest = TaskCursor(task_shard(rank, 5, 2)), {}

        def solved(t: int, latest: dict = latest) -> bool:
            return latest.get(t, 0.0) >= 0.05

        for i, s in enumerate(r["seen"]):
            expected = cursor.next(solved, 3)
            assert s["task"] == expected, (rank, i)
            skipped |= s["task"] != task_at(rank, i, 5, 2)
            for t, name in enumerate(names):
                if f"task/{name}/success" in s["metrics"]:
                    latest[t] = s["metrics"][f"task/{name}/success"]
            # the weights go to the tasks trained (an agreed list, not the plain cycle's)
            shares = [v for k, v in s["metrics"].items() if k.endswith("/grad_share")]
            kept = s["metrics"]["rloo/kept_episodes"]
            assert sum(shares) == pytest.approx(1.0 if kept else 0.0), (rank, i, shares)
    assert skipped, "no task was solved: the test did not exercise skipping"
    from dataclasses import replace as swap

    from distrl.config import DistConfig, validate
    from distrl.session import check_before_start
    from tests.distributed.episodic_workers import tiny_config

    for bad, needle in (
        ({"skip_solved": 0.0}, "skip-solved must be in"),
        ({"skip_solved": 0.9, "solved_revisit": 0}, "solved-revisit must be"),
    ):
        with pytest.raises(ValueError, match=needle):
            validate(tiny_config(2, 1, **bad))
    cfg = tiny_config(2, 1, skip_solved=0.9)
    with pytest.raises(ValueError, match="use allreduce or ps-bsp"):
        check_before_start(swap(cfg, dist=DistConfig(strategy="ps-asp"), nproc=3))
    assert [[s["metrics"] for s in r["seen"]] for r in out][0] == [
        [s["metrics"] for s in r["seen"]] for r in out
    ][1]


@pytest.mark.timeout(120)
def test_early_stop_counter_is_agreed() -> None:
    """Every rank stops at the same iteration, before max_iterations, on the streak computed
    from the all-gathered successes (target 0.05, patience 2)."""
    mt = {"early_stop_success": 0.05, "early_stop_patience": 2, "data_batch_size": 16}
    out = ranks(2, 2, 12, mt)
    its = {r["iteration"] for r in out}
    assert len(its) == 1 and its.pop() < 12, [r["iteration"] for r in out]
    assert out[0]["streak"] == out[1]["streak"] == 2
    streaks = [[s["metrics"]["early_stop/streak"] for s in r["seen"]] for r in out]
    assert streaks[0] == streaks[1] and streaks[0][-2:] == [1, 2]


def train(
    world: int, run_dir: Path, iterations: int, resume: bool = False, mt: dict | None = None
) -> None:
    top = {"run_dir": str(run_dir), "resume": "auto" if resume else None}
    agent = {"max_iterations": iterations, "save_interval": 2}
    results, codes, _ = run_ranks(
        episodic_train,
        world,
        3,
        top,
        agent,
        mt,
        timeout=90,
        start_method="forkserver",
        preload=PRELOAD,
    )
    expect_ok(results, codes, world)


SKIP = {"skip_solved": 0.05, "solved_revisit": 3, "data_batch_size": 16}


@pytest.mark.slow  # three rank groups each: ~8 s
@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("mt", "total", "cut"), [({}, 4, 2), (SKIP, 8, 4), ({"self_imitation": 30}, 6, 4)]
)
def test_resume_equals_uninterrupted_run(tmp_path: Path, mt: dict, total: int, cut: int) -> None:
    """3 tasks on 2 ranks: `total` iterations straight, or `cut` then a resume to `total`; with
    solved tasks skipped too (rank 0's cursor and the agreed successes come back as they were);
    with self-imitation (each rank's kept successes come back as they were)."""
    if "self_imitation" in mt:
        from distrl.demos import make_demos, save_demos
        from distrl.envs.reach import TASK_NAMES

        demos = save_demos(make_demos("reach10", per_task=1, tasks=TASK_NAMES[:3]), tmp_path / "d")
        mt = mt | {"demos": str(demos), "bc_coef": 0.5, "data_batch_size": 16}
    a, b = tmp_path / "A", tmp_path / "B"
    train(2, a, total, mt=mt)
    train(2, b, cut, mt=mt)
    train(2, b, total, resume=True, mt=mt)
    path = [ckpt.checkpoint_path(d / "checkpoints", total) for d in (a, b)]
    load = [ckpt.load_checkpoint(p)[0] for p in path]
    assert load[0]["iteration"] == load[1]["iteration"] == total
    assert_same(load[1], load[0] | {"wall_time": load[1]["wall_time"]}, "state")
    assert len(load[0]["ranks"]) == 2
    # the schedule cursors moved: rank 0 trains tasks [0, 2], rank 1 task [1]
    assert load[0]["ranks"][0]["schedule"]["tasks"]["position"] >= total
    drop = TIMING_KEYS
    strip = [
        [{k: v for k, v in r.items() if not k.startswith(drop)} for r in read_metrics(d)]
        for d in (a, b)
    ]
    assert strip[0] == strip[1]
    if "self_imitation" in mt:  # the kept successes were checkpointed (and some were kept)
        own = [r["own"] for r in load[0]["ranks"]]
        assert any(o.shape[0] > 0 for r in own for o, _ in r.values()), own
        return
    if mt:  # rank 0 (tasks 0 and 2) trained one task two iterations in a row: it skipped one
        from distrl.envs.reach import TASK_NAMES

        zero = [f"task/{TASK_NAMES[0]}/success" in r for r in strip[0]]
        assert any(x == y for x, y in zip(zero, zero[1:], strict=False)), zero


BIN = Path(sys.executable).parent


@pytest.mark.slow  # a torchrun launch that trains: ~12 s
@pytest.mark.timeout(150)
def test_cli_trains_reach10_on_two_ranks(tmp_path: Path) -> None:
    run = tmp_path / "run"
    args = (
        f"train reach10 --nproc 2 --agent.max-iterations 3 --run-dir {run} --env.num-envs 8 "
        f"--multitask.data-batch-size 8 --multitask.group-size 4 --multitask.tasks "
        f"reach-east reach-west reach-north-heavy --threads 1 --tensorboard False"
    )
    code, out, err, _ = run_cli([str(BIN / "distrl"), *args.split()], timeout=120, cwd=tmp_path)
    assert code == 0, out + err
    assert out.count("distrl: task reach10 (episodic RLOO) | 2 rank(s) x 8 envs") == 1, out
    recs = read_metrics(run)
    assert [r["iteration"] for r in recs] == [1, 2, 3]
    first = recs[0]
    assert {"task/reach-east/success", "task/reach-west/episodes"} <= set(first)
    assert first["episodes"] == 16
    files = sorted(p.name for p in run.iterdir())
    assert files == ["checkpoints", "config.yaml", "metrics.jsonl"]  # RunLock removed .lock


@pytest.mark.parametrize("weight", ["steps", "equal"])
def test_episode_weight_reaches_the_advantages(monkeypatch, weight: str) -> None:
    """--multitask.episode-weight decides how the runner spreads each episode's advantage over
    its steps: what the update trains on is rloo_advantages(..., equal_episodes=...) itself."""
    import distrl.runner.episodic as episodic

    calls: list[bool] = []
    original = episodic.rloo_advantages

    def spy(*args, **kwargs):
        out = original(*args, **kwargs)
        calls.append(kwargs["equal_episodes"])
        return out

    monkeypatch.setattr(episodic, "rloo_advantages", spy)
    episodic_run(0, 1, 2, 2, {"episode_weight": weight})
    assert calls == [weight == "equal"] * 2


def test_noise_beta_correlates_the_exploration_within_episodes() -> None:
    """--multitask.noise-beta: the draws behind the collected actions ((action - mean) / std,
    with the policy as it collected) are white by default and strongly correlated from one
    step to the next with beta 2; the run is a function of its seed either way."""

    def lag1(run: dict) -> float:
        pairs = [
            (s["draws"][:, 1:] * s["draws"][:, :-1])[s["mask"][:, 1:]].flatten()
            for s in run["seen"]
        ]
        return float(torch.cat(pairs).mean())

    white = episodic_run(0, 1, 2, 2, {})
    red = episodic_run(0, 1, 2, 2, {"noise_beta": 2.0})
    assert abs(lag1(white)) < 0.15 and lag1(red) > 0.6, (lag1(white), lag1(red))
    again = episodic_run(0, 1, 2, 2, {"noise_beta": 2.0})
    assert torch.equal(red["params"], again["params"])
    assert not torch.equal(red["params"], white["params"])
    from distrl.config import TrainConfig, validate
    from distrl.session import check_before_start
    from tests.distributed.episodic_workers import tiny_config

    with pytest.raises(ValueError, match="noise-beta must be in"):
        validate(tiny_config(2, 1, noise_beta=-1.0))
    with pytest.raises(ValueError, match="noise-beta applies to the episodic suites"):
        check_before_start(TrainConfig(task="cartpole", multitask=MultiTaskConfig(noise_beta=1.0)))


def test_demos_add_a_behaviour_cloning_term_that_trains_even_without_kept_groups(
    tmp_path: Path,
) -> None:
    """--multitask.demos/--multitask.bc-coef (DAPG): the same episodes are collected, and the
    update adds the demonstrations' NLL, so it steps in iterations where RLOO kept nothing (the
    plain run takes no step there) and the weights end elsewhere."""
    from distrl.demos import make_demos, save_demos
    from distrl.envs.reach import TASK_NAMES

    path = save_demos(make_demos("reach10", per_task=2, tasks=TASK_NAMES[:2]), tmp_path / "d.pt")
    plain = episodic_run(0, 1, 2, 3, {})
    anchored = episodic_run(0, 1, 2, 3, {"demos": str(path), "bc_coef": 0.5})
    assert [s["init"] for s in plain["seen"]][:1] == [s["init"] for s in anchored["seen"]][:1]
    for p, a in zip(plain["seen"], anchored["seen"], strict=True):
        assert a["metrics"]["train/updates"] > 0
        if p["metrics"]["rloo/kept_episodes"] == 0:
            assert p["metrics"]["train/updates"] == 0
    assert not torch.equal(plain["params"], anchored["params"])


def test_self_imitation_keeps_each_tasks_newest_successful_steps(tmp_path: Path) -> None:
    """--multitask.self-imitation N: after every update the rank holds, per task it trained,
    the newest N steps (observations and the actions taken) of that task's successful
    episodes, in collection order; the demonstrations term draws from them and the
    demonstrations, so the weights end elsewhere than with the demonstrations alone."""
    from distrl.demos import make_demos, save_demos
    from distrl.envs.reach import TASK_NAMES

    path = save_demos(make_demos("reach10", per_task=2, tasks=TASK_NAMES[:2]), tmp_path / "d.pt")
    anchored = {"demos": str(path), "bc_coef": 0.5, "data_batch_size": 16}
    cap = 40
    run = episodic_run(0, 1, 2, 6, anchored | {"self_imitation": cap})
    plain = episodic_run(0, 1, 2, 6, anchored)
    kept: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}
    for s in run["seen"]:
        real = s["mask"] & s["success"][:, None]
        kept.setdefault(s["task"], []).append((s["obs"][real], s["actions"][real]))
        for t, chunks in kept.items():
            obs = torch.cat([o for o, _ in chunks])[-cap:]
            actions = torch.cat([a for _, a in chunks])[-cap:]
            if obs.shape[0] == 0:
                assert t not in s["own"]
                continue
            assert torch.equal(s["own"][t][0], obs) and torch.equal(s["own"][t][1], actions)
    full = [t for t, (o, _) in run["seen"][-1]["own"].items() if o.shape[0] == cap]
    assert full, "no task filled its buffer: the check above saw too few successes"
    assert all(not s["own"] for s in plain["seen"])
    assert not torch.equal(plain["params"], run["params"])


def test_demos_and_bc_coef_go_together_and_must_be_of_the_suite(tmp_path: Path) -> None:
    from distrl.config import TrainConfig, validate
    from distrl.demos import make_demos, save_demos
    from distrl.session import check_before_start
    from tests.distributed.episodic_workers import tiny_config

    for mt, needle in (
        ({"bc_coef": 0.1}, "go together"),
        ({"demos": "d.pt"}, "go together"),
        ({"demos": "d.pt", "bc_coef": -1.0}, "bc-coef must be a finite number >= 0"),
        ({"bc_batch_size": 0}, "--multitask.bc-batch-size"),
        ({"self_imitation": 100}, "give --multitask.demos FILE and --multitask.bc-coef"),
        ({"demos": "d.pt", "bc_coef": 0.1, "self_imitation": -1}, "self-imitation must be >= 0"),
    ):
        with pytest.raises(ValueError, match=needle):
            validate(tiny_config(2, 1, **mt))
    path = save_demos(make_demos("reach10", per_task=1, tasks=("reach-east",)), tmp_path / "d.pt")
    cfg = tiny_config(2, 1, demos=str(path), bc_coef=0.1)
    check_before_start(replace(cfg, run_dir=str(tmp_path / "run")))  # fine
    with pytest.raises(ValueError, match="applies to the episodic suites"):
        cart = TrainConfig(task="cartpole", multitask=cfg.multitask)
        check_before_start(replace(cart, run_dir=str(tmp_path / "run")))
    with pytest.raises(ValueError, match="holds none of the trained tasks"):
        other = tiny_config(2, 1, demos=str(path), bc_coef=0.1, tasks=("reach-west",))
        check_before_start(replace(other, run_dir=str(tmp_path / "run")))
    with pytest.raises(ValueError, match="no such file"):
        missing = tiny_config(2, 1, demos=str(tmp_path / "none.pt"), bc_coef=0.1)
        check_before_start(replace(missing, run_dir=str(tmp_path / "run")))
