"""The strategy registry: a strategy added as one class and one registry line trains through the
CLI's rank life on real Gloo ranks; options and algorithm pairs a strategy cannot take are
refused before any process starts, with the reason."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from distrl.config import DistConfig, PolicyConfig, PSConfig, TrainConfig
from distrl.distributed.strategies import STRATEGIES, check_strategy
from distrl.runner.algorithms import check_compatible
from tests.distributed.example_strategy import train_local_sgd
from tests.distributed.harness import expect_ok, run_ranks


def test_a_strategy_added_in_one_file_trains_on_real_ranks(tmp_path):
    out = expect_ok(*run_ranks(train_local_sgd, 2, str(tmp_path / "run"), timeout=120)[:2], 2)
    assert out[0]["final"]["iteration"] == 3
    torch.testing.assert_close(out[0]["params"], out[1]["params"], rtol=0, atol=1e-7)
    assert (tmp_path / "run" / "checkpoints").is_dir()  # the runner's parts did the rest


def cfg(task: str = "cartpole", **dist) -> TrainConfig:
    return TrainConfig(task=task, dist=DistConfig(**dist))


@pytest.mark.parametrize(
    "strategy, dist, named",
    [
        ("allreduce", dict(learners=2), "--dist.learners 2 (read by learner-actor)"),
        ("allreduce", dict(ps=PSConfig(staleness=3)), "--dist.ps.staleness 3 (read by ps-bap)"),
        ("ps-asp", dict(ps=PSConfig(lifetime=1.0)), "--dist.ps.lifetime 1.0 (read by ps-bap)"),
        ("ps-bap", dict(ps=PSConfig(staleness_lr=True)), "--dist.ps.staleness-lr True"),
        ("ps-bsp", dict(sync="async"), "--dist.sync 'async' (read by learner-actor)"),
        ("learner-actor", dict(profile_sync=True), "--dist.profile-sync True"),
    ],
)
def test_another_strategys_option_is_refused_by_name(strategy, dist, named):
    with pytest.raises(ValueError, match="does not read") as e:
        check_strategy(cfg(strategy=strategy, **dist), world_size=4)
    assert named in str(e.value) and f"--dist.strategy {strategy}" in str(e.value)


@pytest.mark.parametrize("dist", [dict(max_policy_lag=5), dict(correction="none")])
def test_async_options_without_async_are_refused(dist):
    with pytest.raises(ValueError, match="--dist.sync async"):
        check_strategy(cfg(strategy="learner-actor", **dist), world_size=2)
    check_strategy(cfg(strategy="learner-actor", sync="async", **dist), world_size=2)


def test_an_unknown_strategy_names_the_known_ones():
    bad = dataclasses.replace(cfg(), dist=DistConfig(strategy="ring"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'ring' is not one of"):
        check_strategy(bad, world_size=2)


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_every_registered_strategy_takes_its_own_defaults(strategy):
    check_strategy(cfg(strategy=strategy), world_size=4)


def test_episodic_rloo_under_learner_actor_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="fixed-length rollouts"):
        check_compatible(cfg("reach10", strategy="learner-actor"), world_size=2)


def test_reward_scaling_under_learner_actor_is_accepted():
    """The actors ship their discounted-return moments with each rollout (test_learner_actor)."""
    c = dataclasses.replace(
        cfg(strategy="learner-actor"), policy=PolicyConfig(reward_normalization=True)
    )
    check_compatible(c, world_size=2)


@pytest.mark.parametrize("strategy", ["ps-bsp", "ps-asp", "ps-bap"])
def test_popart_under_a_parameter_server_is_refused_with_the_reason(strategy):
    c = dataclasses.replace(cfg(strategy=strategy), policy=PolicyConfig(popart_tasks=2))
    with pytest.raises(ValueError, match="PopArt rescales the critic's output layer"):
        check_compatible(c, world_size=3)
    check_compatible(dataclasses.replace(c, policy=PolicyConfig()), world_size=3)


@pytest.mark.parametrize(
    "strategy, dist, world, named",
    [
        ("learner-actor", {}, 1, "needs at least 2 processes (ranks 0..0 learn"),
        ("learner-actor", dict(learners=2), 3, "--dist.learners 2 needs at least 4 processes"),
        ("ps-bsp", {}, 1, "--dist.strategy ps-bsp needs at least 2 processes (rank 0 serves"),
    ],
)
def test_too_few_processes_are_refused_with_the_fewest(strategy, dist, world, named):
    with pytest.raises(ValueError, match="needs at least") as e:
        check_strategy(cfg(strategy=strategy, **dist), world_size=world)
    assert named in str(e.value)
    check_strategy(cfg(strategy=strategy, **dist), world_size=world + 1)


def test_skip_solved_without_agreed_statistics_is_refused_naming_the_strategies_that_agree():
    from distrl.config import MultiTaskConfig

    c = dataclasses.replace(cfg("reach10"), multitask=MultiTaskConfig(skip_solved=0.9))
    for strategy in ("ps-asp", "ps-bap"):
        with pytest.raises(ValueError) as e:
            check_compatible(dataclasses.replace(c, dist=DistConfig(strategy=strategy)), 3)
        assert str(e.value) == (
            f"--multitask.skip-solved needs every rank to agree on the tasks' success, which "
            f"--dist.strategy {strategy} does not give its workers; use allreduce or ps-bsp, or "
            f"drop it"
        )
    for strategy in ("allreduce", "ps-bsp"):
        check_compatible(dataclasses.replace(c, dist=DistConfig(strategy=strategy)), 3)
