"""Episodic runs (reach10, MT10) get the checks the on-policy path has: NaN/Inf from an env stops
the run with an error naming rank, task, env and step, before the update; and an iteration
whose updates were skipped for non-finite values leaves the observation normalizer as it was.

On 5b5aa2a neither held: a NaN observation went into the update and was merged into the
normalizer even though the update was skipped, after which every observation normalized to
NaN and the run ended blaming the learning rate (reach10 / MT10).

The NaN is injected by wrapping ``collect_episodes`` (the env returned it), in one process.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from distrl.runner import episodic
from tests.distributed.episodic_workers import tiny_config

NAN_AT = 2  # the iteration whose batch carries the NaN
EPISODE, STEP = 3, 5  # where: batch row (env) 3, obs index 5 (returned by episode step 4)


def _inject_nan(monkeypatch, field: str = "obs") -> None:
    real = episodic.collect_episodes
    calls = []

    def collect(env, *args, **kwargs):
        batch = real(env, *args, **kwargs)
        calls.append(1)
        if len(calls) == NAN_AT:
            x = getattr(batch, field).clone()
            x[EPISODE, STEP] = float("nan")
            batch = dataclasses.replace(batch, **{field: x})
            batch.lengths[EPISODE] = max(int(batch.lengths[EPISODE]), STEP + 1)
        return batch

    monkeypatch.setattr(episodic, "collect_episodes", collect)


def _runner(**env):
    from distrl.distributed import context
    from distrl.distributed.strategies import make_strategy
    from distrl.envs.registry import get_task

    cfg = tiny_config(2, 1, drop_uniform=False)  # every episode is in the update
    cfg = dataclasses.replace(
        cfg,
        env=dataclasses.replace(cfg.env, **env),
        agent=dataclasses.replace(cfg.agent, max_iterations=3, max_consecutive_skips=5),
    )
    ctx = context.init(cfg)
    return episodic.EpisodicRunner(cfg, make_strategy(cfg, ctx), get_task("reach10").suite)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("field", ["obs", "rewards"])
def test_a_nonfinite_episode_stops_the_run_naming_task_env_and_step(monkeypatch, field):
    _inject_nan(monkeypatch, field)
    runner = _runner()
    seen = []
    real_update = runner.update
    monkeypatch.setattr(runner, "update", lambda *a, **k: seen.append(1) or real_update(*a, **k))
    with pytest.raises(RuntimeError) as err:
        runner.learn()
    assert type(err.value).__name__ == "NonFiniteEnvError", repr(err.value)
    msg = str(err.value)
    task = runner.task_names[runner.task]
    what = "observation at episode step 4" if field == "obs" else "reward at episode step 5"
    where = f"rank 0: task {task}: env {EPISODE} (episode {EPISODE}, init state "
    assert msg.startswith(where), msg
    assert f"returned a non-finite {what} (iteration {NAN_AT - 1})" in msg, msg
    assert msg.endswith("the update was not run"), msg
    assert len(seen) == NAN_AT - 1  # the first iteration's update only


@pytest.mark.timeout(60)
@pytest.mark.parametrize("field", ["obs", "logprobs"])
def test_skipped_updates_leave_the_observation_normalizer_untouched(monkeypatch, field):
    # a NaN observation (its moments are NaN), or a NaN log-probability (the observations are
    # finite, but the loss is not): either way every update of that iteration is skipped
    _inject_nan(monkeypatch, field)
    runner = _runner(check_finite=False)  # the NaN reaches the update
    norm = runner.policy.normalizer
    states, skipped = [], []
    real_step = runner.learn_step

    def learn_step():
        metrics = real_step()
        states.append({k: v.clone() for k, v in norm.state_dict().items()})
        skipped.append(metrics.get("train/skipped_updates", 0))
        return metrics

    monkeypatch.setattr(runner, "learn_step", learn_step)
    runner.learn()
    assert skipped[NAN_AT - 1] > 0 and skipped[0] == 0, skipped
    for i, state in enumerate(states):
        for k, v in state.items():
            assert torch.isfinite(v).all(), (i + 1, k, v)
    # the skipped iteration merged nothing: the normalizer is what the iteration before left
    before, at = states[NAN_AT - 2], states[NAN_AT - 1]
    assert all(torch.equal(before[k], at[k]) for k in before), (before, at)
    assert not all(torch.equal(at[k], states[NAN_AT][k]) for k in at)  # and merges again after
