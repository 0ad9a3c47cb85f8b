"""Evaluation: every episode decided before it runs (no first-to-finish bias), during training
without touching it (bitwise the same run with and without), and best.pt kept by eval return.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from distrl import checkpoint as ckpt
from distrl import evaluation
from distrl.envs.core import ActionSpace, VecEnv
from distrl.evaluation import evaluate
from tests.helpers import TIMING_KEYS, assert_same, final_state, run_main, tiny_train_args

pytestmark = pytest.mark.timeout(120)


class Lengths(VecEnv):
    """Env i's episodes last ``i + 1`` steps with reward 1 per step (return i + 1); with
    ``endless`` no episode ever ends."""

    def __init__(self, num_envs: int, endless: bool = False):
        self.num_envs, self.obs_dim = num_envs, 1
        self.action_space = ActionSpace("discrete", n=2)
        self.device = torch.device("cpu")
        self.max_episode_steps = None
        self.endless = endless
        self.t = torch.zeros(num_envs, dtype=torch.int64)

    def reset(self, seed: int | None = None) -> torch.Tensor:
        self.t.zero_()
        return torch.zeros(self.num_envs, 1)

    def step(self, actions: torch.Tensor):
        self.t += 1
        term = (self.t == torch.arange(1, self.num_envs + 1)) & (not self.endless)
        self.t[term] = 0
        obs = torch.zeros(self.num_envs, 1)
        rew = torch.ones(self.num_envs)
        return obs, rew, term, torch.zeros_like(term), {}

    def close(self) -> None:
        pass


class Zero:
    def act_deterministic(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.zeros(obs.shape[0], dtype=torch.int64)


def test_each_env_counts_its_share_not_the_first_to_finish():
    # 4 envs, 8 episodes: 2 of each env (returns 1, 2, 3, 4 twice); counting the first 8 to
    # finish would take env 0's 1-step episodes over and over (mean 1.75 here)
    result = evaluate(Zero(), Lengths(4), episodes=8, seed=0)
    assert sorted(result.returns.tolist()) == [1, 1, 2, 2, 3, 3, 4, 4]
    assert result.mean == 2.5
    assert torch.equal(result.lengths, result.returns.long())
    # 6 of 4 envs: episode j of env i at j * 4 + i, the first 6 of that order
    assert evaluate(Zero(), Lengths(4), episodes=6, seed=0).returns.tolist() == [1, 2, 3, 4, 1, 2]


def test_an_env_that_never_ends_fails_instead_of_hanging(monkeypatch):
    monkeypatch.setattr(evaluation, "NO_LIMIT_STEPS", 50)
    with pytest.raises(ValueError, match="did not finish 1 episode"):
        evaluate(Zero(), Lengths(2, endless=True), episodes=2, seed=0)


EVAL_ARGS = tiny_train_args(16, max_iterations=4, save_interval=2)


def _train(run_dir: Path, capsys, *extra: str) -> str:
    code, out, err = run_main(["train", "cartpole", "--run-dir", str(run_dir), *EVAL_ARGS,
                               *extra], capsys)  # fmt: skip
    assert code == 0, out + err
    return out


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_training_with_evaluation_is_bitwise_training_without(tmp_path, capsys):
    _train(tmp_path / "plain", capsys)
    out = _train(tmp_path / "eval", capsys, "--eval.interval", "1", "--eval.episodes", "3")
    assert out.count("eval: iteration") == 4
    assert_same(final_state(tmp_path / "eval", 4), final_state(tmp_path / "plain", 4))
    evals = [r for r in _records(tmp_path / "eval") if "eval/return_mean" in r]
    assert [r["iteration"] for r in evals] == [1, 2, 3, 4]
    for r in evals:
        assert r["eval/length_mean"] > 0 and r["eval/return_std"] >= 0
    plain = _records(tmp_path / "plain")
    timing = (*TIMING_KEYS, "eval/")
    for a, b in zip(plain, _records(tmp_path / "eval"), strict=True):
        assert {k: v for k, v in a.items() if not k.startswith(timing)} == {
            k: v for k, v in b.items() if not k.startswith(timing)
        }


def test_best_pt_is_the_best_eval_and_outside_resume_and_pruning(tmp_path, capsys):
    run = tmp_path / "run"
    _train(run, capsys, "--eval.interval", "1", "--agent.keep-checkpoints", "1")
    best = run / "checkpoints" / "best.pt"
    evals = [r for r in _records(run) if "eval/return_mean" in r]
    top = max(evals, key=lambda r: r["eval/return_mean"])
    manifest = ckpt.read_manifest(best)
    assert manifest["eval_return_mean"] == top["eval/return_mean"]
    assert manifest["iteration"] == top["iteration"] and manifest["policy_only"]
    assert best not in ckpt.list_checkpoints(run / "checkpoints")  # resume and pruning skip it
    assert [p.name for p in ckpt.list_checkpoints(run / "checkpoints")] == ["ckpt_00000004.pt"]

    code, out, _ = run_main(["play", str(best), "--episodes", "2"], capsys)
    assert code == 0 and f"iteration {top['iteration']}" in out
    assert "the run keeps best.pt" not in out  # it is the file played
    code, out, _ = run_main(["play", str(run), "--episodes", "2"], capsys)  # the newest
    assert code == 0 and f"the run keeps best.pt (iteration {top['iteration']}" in out
    code, _, err = run_main(["train", "cartpole", "--resume", str(best), *EVAL_ARGS], capsys)
    assert code == 2 and "holds only a policy" in err

    # a resumed run compares new evaluations with the best it kept before
    _train(run, capsys, "--resume", "auto", "--eval.interval", "1", "--agent.max-iterations", "6")
    evals = [r for r in _records(run) if "eval/return_mean" in r]
    assert ckpt.read_manifest(best)["eval_return_mean"] == max(r["eval/return_mean"] for r in evals)


def test_eval_settings_are_checked_before_anything_starts(tmp_path, capsys):
    for argv, message in [
        (["cartpole", "--eval.interval", "-1"], "--eval.interval must be 0 (off) or more"),
        (["cartpole", "--eval.episodes", "0"], "--eval.episodes must be at least 1"),
    ]:
        code, _, err = run_main(["train", *argv, "--run-dir", str(tmp_path / "r")], capsys)
        assert code == 2 and message in err, err
        assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_evaluation_on_two_ranks_runs_on_rank_0_only(tmp_path, capsys):
    out = _train(tmp_path / "r", capsys, "--nproc", "2", "--eval.interval", "2")
    records = _records(tmp_path / "r")
    assert [r["iteration"] for r in records if "eval/return_mean" in r] == [2, 4]
    assert (tmp_path / "r" / "checkpoints" / "best.pt").is_file()
    assert out.count("error") == 0
