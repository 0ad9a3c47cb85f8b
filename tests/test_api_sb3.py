"""The Python API as Stable-Baselines3 users reach for it: callbacks that add to the record and
stop training (``distrl.EvalCallback`` among them), ``distrl.evaluate`` of a run, a file or a
policy, ``result.save`` / ``distrl.load_policy`` of one file, and SB3's keywords answered with
distrl's spelling. The stop itself on several ranks: tests/distributed/test_early_stop.py."""

from __future__ import annotations

import pytest
import torch

import distrl
from distrl import checkpoint as ckpt
from distrl.telemetry import read_metrics
from tests.helpers import api_train

pytestmark = pytest.mark.timeout(120)


class Extra(distrl.Hooks):
    def on_record(self, runner, record) -> None:
        record["my/iteration_squared"] = runner.iteration**2


def test_a_hook_may_ask_to_stop_from_any_method(tmp_path):
    class Enough(distrl.Hooks):
        def after_update(self, runner, metrics) -> None:
            if runner.iteration == 2:  # the third update (the count advances after it)
                runner.request_stop("enough")

    hooks = [Enough(), Extra()]
    result = api_train("cartpole", tmp_path, agent={"max_iterations": 8}, hooks=hooks)
    assert result.metrics["iteration"] == 3 and result.metrics["stopped"] == "enough"
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert records[-1]["stopped"] == "enough"
    assert [r["my/iteration_squared"] for r in records] == [1, 4, 9]  # on_record: logged too


def test_eval_callback_records_its_figures_and_stops_at_its_target(tmp_path, capsys):
    ev = distrl.EvalCallback(every=2, episodes=4, target=1.0)  # any return reaches 1
    result = api_train("cartpole", tmp_path, agent={"max_iterations": 8}, hooks=[ev])
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["iteration"] for r in records] == [1, 2]  # one process: stops where it asked
    assert "eval/return_mean" not in records[0] and records[1]["eval/return_mean"] >= 1.0
    assert records[1]["eval/return_mean"] == ev.last["eval/return_mean"]
    reason = f"EvalCallback: eval return {ev.last['eval/return_mean']:.2f} >= target 1"
    assert records[1]["stopped"] == result.metrics["stopped"] == reason
    assert result.checkpoint is not None and result.checkpoint.name == "ckpt_00000002.pt"
    assert "interrupted" not in result.metrics
    assert f"stopped at iteration 2: {reason}; final checkpoint" in capsys.readouterr().out


def test_eval_callback_counts_env_steps_with_sb3s_eval_freq(tmp_path, capsys):
    """SB3's eval_freq counts steps (EvalCallback's every counts iterations): 16 envs x 8
    steps = 128 an iteration, so eval_freq=300 evaluates at 384 and 640 env steps."""
    ev = distrl.EvalCallback(eval_freq=300, episodes=2)
    api_train("cartpole", tmp_path, agent={"max_iterations": 6}, hooks=[ev])
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["iteration"] for r in records if "eval/return_mean" in r] == [3, 5]
    out = capsys.readouterr().out
    assert "eval: iteration 3 (384 env steps), return " in out and " ± " in out


def test_evaluate_takes_a_run_a_file_a_result_or_a_policy_with_its_config(tmp_path):
    result = api_train("cartpole", tmp_path / "run")
    by_run = distrl.evaluate(result.run_dir, episodes=6)
    assert by_run.returns.shape == by_run.lengths.shape == (6,)
    for other in (
        distrl.evaluate(result.checkpoint, episodes=6),
        distrl.evaluate(result, episodes=6),
        distrl.evaluate(result.policy, episodes=6, config=result.config),
        distrl.evaluate(result.policy, episodes=6, config="cartpole"),  # the task's defaults
    ):
        assert torch.equal(other.returns, by_run.returns)
    mean, std = by_run  # as SB3's evaluate_policy
    assert (mean, std) == (by_run.mean, by_run.std)
    assert by_run.length_mean == float(by_run.lengths.float().mean())  # cartpole: 1 per step
    sampled = distrl.evaluate(result, episodes=6, deterministic=False)
    assert sampled.returns.shape == (6,)
    with pytest.raises(ValueError, match="needs the task it acts in"):
        distrl.evaluate(result.policy)


def test_save_writes_one_verified_file_that_load_policy_reads_back(tmp_path):
    result = api_train("cartpole", tmp_path / "run")
    path = result.save(tmp_path / "saved" / "policy.pt")
    assert path == tmp_path / "saved" / "policy.pt"
    assert sorted(p.name for p in path.parent.iterdir()) == ["policy.json", "policy.pt"]
    policy, cfg = distrl.load_policy(path)
    assert cfg == result.config
    assert all(
        torch.equal(v, result.policy.state_dict()[k]) for k, v in policy.state_dict().items()
    )
    manifest = ckpt.read_manifest(path)
    assert manifest["policy_only"] and manifest["iteration"] == 2
    obs = torch.randn(5, 4)
    assert torch.equal(policy.act_deterministic(obs), result.policy.act_deterministic(obs))
    assert distrl.save(policy, tmp_path / "again.pt", cfg).is_file()
    # a name without a suffix gets .pt, as SB3's save adds .zip (it was refused)
    assert distrl.save(policy, tmp_path / "model", cfg) == tmp_path / "model.pt"
    for bad in ("ckpt_00000002.pt", "policy.pth"):  # resume would take the first for its own
        with pytest.raises(ValueError, match=r"name it \*\.pt"):
            result.save(tmp_path / bad)
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF  # a flipped byte is caught by the sha256 before anything is unpickled
    path.write_bytes(bytes(data))
    with pytest.raises(ckpt.CheckpointError):
        distrl.load_policy(path)


@pytest.mark.parametrize(
    "keyword, value, spelled",
    [
        ("total_timesteps", 1000, "pass agent={'total_timesteps': 1000}"),
        ("learning_rate", 3e-4, "pass agent={'learning_rate': 0.0003}"),
        ("n_envs", 8, "Stable-Baselines3's name: pass env={'num_envs': 8}"),
        ("n_steps", 64, "Stable-Baselines3's name: pass agent={'num_steps': 64}"),
        ("batch_size", 64, "pass agent={'num_minibatches': ...} (not a size"),
        ("policy_kwargs", {"net_arch": [64, 64]}, "pass policy={...} (distrl's own fields"),
        ("callback", object(), "pass hooks=... (an argument of train()"),
    ],
)
def test_stable_baselines3_keywords_say_how_distrl_spells_them(keyword, value, spelled):
    with pytest.raises(ValueError) as e:
        distrl.train("cartpole", **{keyword: value})
    assert str(e.value).startswith(f"unknown config field {keyword!r}; ")
    assert spelled in str(e.value)
    assert distrl.make_config("cartpole", seed=3).seed == 3  # (seed is spelled alike)


def test_target_return_is_a_finite_number():
    with pytest.raises(ValueError, match="--agent.target-return must be a finite return"):
        distrl.make_config("cartpole", agent={"target_return": float("nan")})
