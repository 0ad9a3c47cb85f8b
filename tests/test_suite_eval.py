"""Episodic suites are evaluated as the field reports them: per task, from held-out init states
that training and the demonstrations never use; the same during training (eval/* records,
best.pt by held-out success, training bitwise untouched), in `play` and after `pretrain`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from distrl import checkpoint as ckpt
from distrl.demos import reach_expert
from distrl.envs.reach import TASK_NAMES, Reach, held_out_init_states, load_init_states
from distrl.envs.registry import get_task
from distrl.evaluation import evaluate_suite
from tests.helpers import QUIET, assert_same, final_state, run_main

pytestmark = pytest.mark.timeout(180)

SUITE = get_task("reach10").suite
assert SUITE is not None


class Scripted(torch.nn.Module):
    """The reach expert (or a policy that never pushes) behind ``act_deterministic``."""

    def __init__(self, idle: bool = False):
        super().__init__()
        self.idle = idle
        self.seen: list[torch.Tensor] = []

    def act_deterministic(self, obs: torch.Tensor) -> torch.Tensor:
        self.seen.append(obs.clone())
        return torch.zeros(obs.shape[0], 2) if self.idle else reach_expert(obs)


def test_held_out_init_states_are_new_positions_of_the_same_kind():
    for name in TASK_NAMES:
        train = torch.tensor(load_init_states(name))
        held = torch.tensor(held_out_init_states(name))
        assert held.shape == train.shape == (50, 4)
        assert torch.cdist(held[:, :2], train[:, :2]).min() > 1e-3  # no start shared
        assert held[:, 2:].abs().max() == 0 and held[:, :2].abs().max() <= 0.9  # at rest, inside
    env = Reach(3, held_out=True, task=TASK_NAMES[4])
    mask = torch.ones(3, dtype=torch.bool)
    obs = env.reset_rows(mask, torch.tensor([0, 7, 49]))
    assert torch.equal(obs[:, :4], torch.tensor(held_out_init_states(TASK_NAMES[4]))[[0, 7, 49]])


def test_evaluate_suite_runs_episode_i_from_held_out_state_i_per_task():
    expert = Scripted()
    result = evaluate_suite(expert, SUITE, TASK_NAMES[:3], episodes=5, num_envs=2)
    assert result.success.shape == (3, 5) and result.held_out
    assert result.per_task == dict.fromkeys(TASK_NAMES[:3], 1.0) and result.mean == 1.0
    # the first observations of the first task: held-out states 0 and 1 (2 envs)
    first = expert.seen[0][:, :4]
    assert torch.equal(first, torch.tensor(held_out_init_states(TASK_NAMES[0]))[:2])

    idle = evaluate_suite(Scripted(idle=True), SUITE, TASK_NAMES, episodes=50)
    assert idle.mean < 0.2  # standing still reaches no goal (the wind carries a few)
    metrics = idle.metrics()
    assert metrics["eval/success"] == idle.mean
    assert {f"eval/task/{n}/success" for n in TASK_NAMES} <= metrics.keys()
    train = evaluate_suite(Scripted(), SUITE, TASK_NAMES[:1], episodes=3, held_out=False)
    assert not train.held_out and train.mean == 1.0
    with pytest.raises(ValueError, match="at least 1"):
        evaluate_suite(expert, SUITE, TASK_NAMES, episodes=0)


TINY = ["--multitask.data-batch-size", "16", "--multitask.group-size", "4",
        "--agent.max-iterations", "4", *QUIET]  # fmt: skip


def _records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_reach10_evaluates_held_out_success_during_training_without_touching_it(tmp_path, capsys):
    plain, ev = tmp_path / "plain", tmp_path / "eval"
    code, _, err = run_main(["train", "reach10", "--run-dir", str(plain), *TINY], capsys)
    assert code == 0, err
    code, out, err = run_main(["train", "reach10", "--run-dir", str(ev), *TINY,
                               "--eval.interval", "2", "--eval.episodes", "4"], capsys)  # fmt: skip
    assert code == 0, err
    assert out.count("held-out success") == 2
    assert_same(final_state(ev, 4), final_state(plain, 4))
    evals = [r for r in _records(ev) if "eval/success" in r]
    assert [r["iteration"] for r in evals] == [2, 4]
    for r in evals:
        rates = [r[f"eval/task/{n}/success"] for n in TASK_NAMES]
        assert all(v in (0.0, 0.25, 0.5, 0.75, 1.0) for v in rates)  # 4 episodes per task
        assert r["eval/success"] == pytest.approx(sum(rates) / len(rates))
    best = ckpt.read_manifest(ev / "checkpoints" / "best.pt")
    assert best["eval_metric"] == "eval/success"
    assert best["eval_score"] == max(r["eval/success"] for r in evals)

    out_json = tmp_path / "play.json"
    code, out, err = run_main(["play", str(ev), "--episodes", "3", "--json", str(out_json)], capsys)
    assert code == 0, err
    assert "held-out init states" in out and TASK_NAMES[-1] in out
    doc = json.loads(out_json.read_text())
    assert doc["init_states"] == "held-out" and doc["episodes_per_task"] == 3
    assert set(doc["per_task"]) == set(TASK_NAMES) and doc["iteration"] == 4


def test_play_evaluates_the_trained_tasks_or_those_named(tmp_path, capsys):
    run = tmp_path / "run"
    code, _, err = run_main(["train", "reach10", "--run-dir", str(run), *TINY,
                             "--multitask.tasks", "reach-east", "reach-west"], capsys)  # fmt: skip
    assert code == 0, err
    for extra, tasks in (
        ([], ["reach-east", "reach-west"]),
        (["--tasks", "all"], TASK_NAMES),
        (["--tasks", "reach-center-drift"], ["reach-center-drift"]),
    ):
        out_json = tmp_path / "play.json"
        code, _, err = run_main(
            ["play", str(run), "--episodes", "1", "--json", str(out_json), *extra], capsys
        )
        assert code == 0, err
        assert list(json.loads(out_json.read_text())["per_task"]) == list(tasks)
    code, _, err = run_main(["play", str(run), "--tasks", "reach-esat"], capsys)
    assert code == 2 and "--tasks: reach-esat (did you mean" in err and "Traceback" not in err


def test_evaluation_horizon_is_the_training_one_unless_given(tmp_path, capsys, monkeypatch):
    """--eval.max-episode-steps (training) and play's --max-episode-steps score a run trained
    on short episodes on longer ones (Meta-World's 500); by default both keep the training
    limit. A PPO task refuses the play flag."""
    import distrl.evaluation
    import distrl.play

    limits: list[int | None] = []

    def spy(*args, **kwargs):
        limits.append(args[6])
        return evaluate_suite(*args, **kwargs)

    monkeypatch.setattr(distrl.evaluation, "evaluate_suite", spy)
    monkeypatch.setattr(distrl.play, "evaluate_suite", spy)
    run = tmp_path / "run"
    code, _, err = run_main(["train", "reach10", "--run-dir", str(run), *TINY,
                             "--multitask.tasks", "reach-east", "--env.max-episode-steps", "7",
                             "--eval.interval", "4", "--eval.episodes", "1",
                             "--eval.max-episode-steps", "30"], capsys)  # fmt: skip
    assert code == 0, err
    assert limits == [30]
    out_json = tmp_path / "play.json"
    for extra, limit in (([], 7), (["--max-episode-steps", "30"], 30)):
        code, _, err = run_main(
            ["play", str(run), "--episodes", "1", "--json", str(out_json), *extra], capsys
        )
        assert code == 0, err
        assert (
            limits[-1] == limit and json.loads(out_json.read_text())["max_episode_steps"] == limit
        )
    code, _, err = run_main(["play", str(run), "--max-episode-steps", "0"], capsys)
    assert code == 2 and "--max-episode-steps must be at least 1" in err
    code, _, err = run_main(["train", "reach10", "--eval.max-episode-steps", "0", *QUIET], capsys)
    assert code == 2 and "--eval.max-episode-steps must be at least 1" in err
    cart = tmp_path / "cart"
    code, _, err = run_main(["train", "cartpole", "--run-dir", str(cart),
                             "--agent.max-iterations", "1", *QUIET], capsys)  # fmt: skip
    assert code == 0, err
    code, _, err = run_main(["play", str(cart), "--max-episode-steps", "30"], capsys)
    assert code == 2 and "--max-episode-steps applies to the episodic suites" in err
