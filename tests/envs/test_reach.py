"""Reach10: shipped init states, dynamics corner cases, episodic resets, resume, devices."""

from __future__ import annotations

import json
import tomllib
from fnmatch import fnmatch
from importlib import resources
from pathlib import Path

import pytest
import torch

from distrl.envs.reach import (
    GOAL_RADIUS,
    OBS_DIM,
    REACH_TASKS,
    TASK_NAMES,
    Reach,
    generate_init_states,
    load_init_states,
    task_index,
)
from tests.envs.reach_init_states import render


def test_suite_has_distinct_tasks() -> None:
    assert len(REACH_TASKS) >= 8
    assert len(set(TASK_NAMES)) == len(TASK_NAMES)
    assert len({t.goal for t in REACH_TASKS}) == len(REACH_TASKS)
    assert any(t.obstacle[2] > 0 for t in REACH_TASKS)
    assert len({(t.mass, t.damping, t.wind) for t in REACH_TASKS}) >= 4


@pytest.mark.parametrize("task", REACH_TASKS, ids=TASK_NAMES)
def test_shipped_init_states_are_the_generated_ones(task) -> None:
    path = resources.files("distrl.envs").joinpath("init_states", "reach", f"{task.name}.json")
    rows = generate_init_states(task)
    assert path.read_text() == render(task.name, rows)  # byte for byte: regenerate, never edit
    assert load_init_states(task.name) == tuple(tuple(r) for r in rows)
    assert len(rows) == Reach.num_init_states
    assert json.loads(path.read_text())["task"] == task.name


def test_shipped_init_states_are_packaged() -> None:
    # pyproject's package-data must match every list, or an installed wheel would lack it
    root = Path(__file__).resolve().parents[2]
    globs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["distrl.envs"]
    envs = root / "src" / "distrl" / "envs"
    files = [p.relative_to(envs).as_posix() for p in (envs / "init_states").rglob("*.json")]
    assert len(files) == len(REACH_TASKS)
    assert all(any(fnmatch(f, g) for g in globs) for f in files), (files, globs)


def test_reset_rows_starts_from_the_given_init_states() -> None:
    env = Reach(4, task="reach-west")
    env.reset(seed=0)
    table = torch.tensor(load_init_states("reach-west"))
    before = env.state.clone()
    mask = torch.tensor([True, False, True, False])
    obs = env.reset_rows(mask, torch.tensor([7, 999, 49, -5]))  # unmasked entries ignored
    assert torch.equal(obs[0, :4], table[7]) and torch.equal(obs[2, :4], table[49])
    assert torch.equal(obs[1, :4], before[1]) and torch.equal(obs[3, :4], before[3])
    obs = env.reset_to(torch.tensor([0, 1, 2, 3]))
    assert torch.equal(obs[:, :4], table[:4])
    assert env.elapsed.tolist() == [0, 0, 0, 0]


def test_observation_layout() -> None:
    task = REACH_TASKS[task_index("reach-northwest-post-wind")]
    env = Reach(1, task=task.name)
    obs = env.reset_to(torch.tensor([0]))
    x, y = obs[0, :2].tolist()
    expected = [x, y, 0.0, 0.0, task.goal[0] - x, task.goal[1] - y]
    expected += [task.obstacle[0] - x, task.obstacle[1] - y, task.obstacle[2]]
    expected += [task.mass, task.damping, *task.wind]
    assert obs.shape == (1, OBS_DIM)
    torch.testing.assert_close(obs[0], torch.tensor(expected))
    no_obstacle = Reach(1, task="reach-east").reset_to(torch.tensor([0]))
    assert no_obstacle[0, 6:9].tolist() == [0.0, 0.0, 0.0]


def put(env: Reach, rows: list[list[float]]) -> None:
    env.state = torch.tensor(rows)
    env.elapsed.zero_()


def test_dynamics_one_step_by_hand() -> None:
    # reach-northeast-wind: mass 1, damping 0.5, wind (-0.3, 0); force 2, dt 0.1
    env = Reach(1, task="reach-northeast-wind")
    env.reset(seed=0)
    put(env, [[0.0, 0.0, 1.0, 0.0]])
    obs, reward, term, trunc, info = env.step(torch.tensor([[1.0, -0.5]]))
    # a = (2 * (1, -0.5) + (-0.3, 0) - 0.5 * (1, 0)) / 1 = (1.2, -1); v' = (1.12, -0.1)
    torch.testing.assert_close(obs[0, :4], torch.tensor([0.112, -0.01, 1.12, -0.1]))
    assert reward.item() == 0.0 and not term.item() and not trunc.item()
    assert not info["success"].item()


def test_success_terminates_with_reward_one_and_shaping_telescopes() -> None:
    env = Reach(2, task="reach-east", shaping=0.1)  # goal (0.6, 0)
    env.reset(seed=0)
    put(env, [[0.6 - GOAL_RADIUS - 0.01, 0.0, 0.5, 0.0], [0.0, 0.0, 0.0, 0.0]])
    obs, reward, term, trunc, info = env.step(torch.tensor([[1.0, 0.0], [0.0, 0.0]]))
    assert term.tolist() == [True, False] and torch.equal(info["success"], term)
    final = info["final_obs"][0]
    d0, d1 = GOAL_RADIUS + 0.01, abs(0.6 - float(final[0]))
    assert reward[0].item() == pytest.approx(1.0 + 0.1 * (d0 - d1), abs=1e-6)
    assert reward[1].item() == pytest.approx(0.0, abs=1e-7)  # at rest: no progress, no shaping
    assert env.elapsed[0].item() == 0  # row 0 restarted in the same step


def test_walls_stop_the_mass() -> None:
    env = Reach(1, task="reach-east")
    env.reset(seed=0)
    put(env, [[0.99, -0.99, 1.0, -1.0]])
    obs, *_ = env.step(torch.tensor([[1.0, -1.0]]))
    assert obs[0, :4].tolist() == [1.0, -1.0, 0.0, 0.0]


def test_obstacle_pushes_out_to_its_rim_and_keeps_the_tangential_velocity() -> None:
    env = Reach(1, task="reach-far-north-gate")  # obstacle centre (0, 0.45), radius 0.25
    env.reset(seed=0)
    put(env, [[0.0, 0.15, 0.0, 2.0]])  # heading straight into it from below
    obs, *_ = env.step(torch.tensor([[0.0, 1.0]]))
    torch.testing.assert_close(obs[0, :4], torch.tensor([0.0, 0.2, 0.0, 0.0]))
    put(env, [[0.1, 0.2, 0.5, 1.0]])  # glancing: it slides along the rim
    obs, *_ = env.step(torch.tensor([[0.0, 0.0]]))
    pos, vel = obs[0, :2], obs[0, 2:4]
    normal = (pos - torch.tensor([0.0, 0.45])) / 0.25
    assert (pos - torch.tensor([0.0, 0.45])).norm().item() == pytest.approx(0.25, abs=1e-6)
    assert float(vel @ normal) == pytest.approx(0.0, abs=1e-6)


def test_time_limit_truncates() -> None:
    env = Reach(3, max_episode_steps=5, task="reach-west")
    env.reset(seed=0)
    for _ in range(4):
        _, _, term, trunc, _ = env.step(torch.zeros(3, 2))
        assert not trunc.any()
    _, _, term, trunc, _ = env.step(torch.zeros(3, 2))
    assert trunc.all() and not term.any()


def test_multi_task_rows_and_set_task() -> None:
    env = Reach(3, task=[0, "reach-west", 9])
    obs = env.reset_to(torch.tensor([1, 1, 1]))
    goals = torch.tensor([REACH_TASKS[i].goal for i in (0, 1, 9)])
    torch.testing.assert_close(obs[:, 4:6] + obs[:, :2], goals)
    env.set_task("reach-center-drift")
    obs = env.reset_to(torch.tensor([0, 1, 2]))
    assert torch.equal(obs[:, :4], torch.tensor(load_init_states("reach-center-drift")[:3]))
    with pytest.raises(ValueError, match="unknown reach task"):
        Reach(1, task="reach-moon")
    with pytest.raises(ValueError, match="3 envs"):
        env.set_task([0, 1])


def test_resume_is_bitwise() -> None:
    def run(env: Reach, n: int) -> list[torch.Tensor]:
        g = torch.Generator().manual_seed(n)
        return [env.step(torch.rand(4, 2, generator=g) * 2 - 1)[0] for _ in range(n)]

    a = Reach(4, task=[0, 3, 6, 8])
    a.reset(seed=3)
    run(a, 30)
    saved = a.state_dict()
    expected = run(a, 40)
    b = Reach(4, task=0)
    b.load_state_dict(saved)
    got = run(b, 40)
    assert all(torch.equal(x, y) for x, y in zip(expected, got, strict=True))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_runs_on_cuda_like_on_cpu() -> None:
    outs = []
    for device in ("cpu", "cuda"):
        env = Reach(8, device=device, task=list(range(8)), shaping=0.05)
        obs = env.reset_to(torch.arange(8, device=device) * 6)
        actions = torch.linspace(-1, 1, 16).reshape(8, 2).to(device)
        for _ in range(20):
            obs, reward, *_ = env.step(actions)
        outs.append((obs.cpu(), reward.cpu()))
    torch.testing.assert_close(outs[0], outs[1], atol=1e-5, rtol=1e-5)
