"""The role loops (runner/roles.py), in one process: the loop is picked by the link the strategy
gives the rank, every role's record comes from the one builder, and a parameter server's rank
takes in its workers' statistics the way a collecting rank takes in ``reduce_stats``
(``Runner.absorb``): normalizer, env steps, episode windows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from distrl.distributed import context
from distrl.distributed.base import LEARN_FROM_ACTORS, SERVE, Role, ServerEvent
from distrl.distributed.strategies import make_strategy
from distrl.envs.registry import make_env
from distrl.policy import Moments
from distrl.runner.on_policy import OnPolicyRunner
from distrl.storage.rollout import WINDOW
from tests.distributed.workers import small_config

COMMON = {"iteration", "env_steps", "wall_time", "unix_time", "perf/sps", "time/iteration"}
COMMON |= {"time/rollout", "time/learn", "time/comm", "time/sync"}


class FakeServer:
    """A ServerLink that hands the server's loop a statistics message per iteration (as a
    parameter server's receiver would: the summed row, the senders' rows, the live workers)
    and records what the loop asked of it."""

    def __init__(self, messages: list[tuple[torch.Tensor, dict[int, torch.Tensor], set[int]]]):
        self.messages, self.released = messages, False
        self.decisions: list[bool] = []  # should_stop's answer to each message

    def serve(self, on_stats, start_iteration, should_stop, layout=None):
        for it, (sums, rows, live) in enumerate(self.messages, start_iteration + 1):
            on_stats(sums, rows, live)
            self.decisions.append(should_stop())
            metrics = {"time/iteration": 0.5, "dist/server_wait": 0.125, "dist/workers": 2}
            yield ServerEvent("iteration", it, metrics)

    def release(self) -> list[str]:
        self.released = True
        return []


def server_runner(cfg, ctx, link: FakeServer) -> OnPolicyRunner:
    strategy = make_strategy(cfg, ctx)  # one process: allreduce's identity collectives
    strategy.role = Role(SERVE)  # the strategy is its role's link: this one serves as ``link``
    strategy.serve, strategy.release = link.serve, link.release  # type: ignore[method-assign]
    return OnPolicyRunner(cfg, strategy, make_env(cfg, ctx.device))


def worker_row(runner: OnPolicyRunner, steps: int, obs: torch.Tensor, ret: float) -> torch.Tensor:
    """One worker's statistics row, packed by the runner's own layout."""
    layout = runner.stats_layout
    window = torch.full((WINDOW, 3), -1.0)
    window[-1] = torch.tensor([ret, 10.0, 1.0])  # one finished episode of return ``ret``
    sums = {
        "batch": torch.tensor([64.0, 0.0, 64.0, 64.0, 128.0, 0.0, 32.0], dtype=torch.float64),
        "env_steps": torch.tensor([float(steps)], dtype=torch.float64),
        "obs": Moments.of(obs).to_flat(),
    }
    gather = {"rollout_time": torch.tensor([0.25], dtype=torch.float64), "episodes": window}
    return layout.pack(sums, gather)


def serve(iterations: int, messages: Callable[[OnPolicyRunner], list], **agent: Any) -> tuple:
    """A server rank in this process, its link handing it ``messages(runner)`` (built with the
    runner's own layout): (runner, link, its records)."""
    cfg = small_config(4, distributed=False, max_iterations=iterations, **agent)
    ctx = context.init(cfg)
    try:
        records: list[dict[str, Any]] = []
        link = FakeServer([])
        runner = server_runner(cfg, ctx, link)
        runner.hooks.append(_Recorder(records))
        link.messages = messages(runner)
        runner.learn()
    finally:
        context.shutdown()
    return runner, link, records


@pytest.mark.timeout(60)
def test_a_server_rank_absorbs_its_workers_statistics_and_records_through_the_builder():
    obs_1, obs_2 = torch.randn(8, 4), torch.randn(8, 4) + 3.0  # cartpole's 4-D observations

    def messages(runner: OnPolicyRunner) -> list:
        rows = {1: worker_row(runner, 64, obs_1, 20.0), 2: worker_row(runner, 64, obs_2, 40.0)}
        num_sums = runner.stats_layout.num_sums
        summed = rows[1][:num_sums] + rows[2][:num_sums]
        return [(summed, rows, {1, 2}), (summed, rows, {1, 2})]

    runner, link, records = serve(2, messages)
    assert link.released
    assert [r["iteration"] for r in records] == [1, 2]
    assert [r["env_steps"] for r in records] == [128, 256]  # every worker's rollouts
    first = records[0]
    assert set(first) >= COMMON
    assert first["episode_return_mean"] == 30.0  # both workers' windows
    assert runner.stop_early is False  # it sees every worker: it would decide (no target set)
    assert first["time/rollout"] == 0.25 and first["time/comm"] == 0.125
    assert first["time/learn"] == pytest.approx(0.375)
    # the normalizer took in both workers' moments, twice
    both = Moments.of(torch.cat([obs_1, obs_2]))
    assert float(runner.policy.normalizer.count) == pytest.approx(2 * float(both.count), abs=1)


@pytest.mark.timeout(60)
def test_a_dropped_workers_episodes_leave_the_servers_return_mean():
    """ps-asp and ps-bap go on without a dropped worker; the mean return it logs (and stops at,
    with --agent.target-return) is then over the live workers' newest episodes alone."""

    def messages(runner: OnPolicyRunner) -> list:
        obs = torch.randn(8, runner.env.obs_dim)
        row_1, row_2 = worker_row(runner, 64, obs, 20.0), worker_row(runner, 64, obs, 40.0)
        sums = row_1[: runner.stats_layout.num_sums]
        dropped = (sums, {1: row_1}, {1})  # worker 2 was dropped
        return [(sums, {1: row_1}, {1, 2}), (sums, {2: row_2}, {1, 2}), dropped]

    _, _, records = serve(3, messages)
    assert [r["episode_return_mean"] for r in records] == [20.0, 30.0, 20.0]


@pytest.mark.timeout(60)
def test_a_servers_early_stop_stands_when_later_episodes_pull_the_mean_back():
    """Under ps-asp the server decides the stop on the rounds it has; workers mid-iteration
    then finish it and report episodes that can move the mean back under the target. The
    decision and its reason stand (the run once ended without saying why it stopped)."""

    def messages(runner: OnPolicyRunner) -> list:
        obs = torch.randn(8, runner.env.obs_dim)
        row_1, row_2 = worker_row(runner, 64, obs, 40.0), worker_row(runner, 64, obs, 40.0)
        late = worker_row(runner, 64, obs, 20.0)
        both = row_1[: runner.stats_layout.num_sums] + row_2[: runner.stats_layout.num_sums]
        return [(both, {1: row_1, 2: row_2}, {1, 2}), (both, {1: late}, {1, 2})]

    runner, link, records = serve(2, messages, target_return=35.0)
    assert [r["episode_return_mean"] for r in records] == [40.0, 30.0]
    assert link.decisions == [True, True]
    reason = "target return 35 reached (episode_return_mean 40.00, every rank's newest episodes)"
    assert [r["stopped"] for r in records] == [reason, reason]
    assert runner.stop_reason == reason


class _Recorder:
    def __init__(self, out: list[dict[str, Any]]):
        self.out = out

    def before_update(self, runner: Any) -> None:
        pass

    def after_update(self, runner: Any, metrics: dict[str, Any]) -> None:
        pass

    def after_iteration(self, runner: Any, record: dict[str, Any]) -> None:
        self.out.append(dict(record))


@pytest.mark.timeout(60)
def test_a_rank_without_a_link_collects_and_learns_with_the_same_record_keys():
    cfg = small_config(4, distributed=False, max_iterations=2)
    ctx = context.init(cfg)
    try:
        records: list[dict[str, Any]] = []
        runner = OnPolicyRunner(cfg, make_strategy(cfg, ctx), make_env(cfg, ctx.device))
        runner.hooks.append(_Recorder(records))
        final = runner.learn()
    finally:
        context.shutdown()
    assert [r["iteration"] for r in records] == [1, 2]
    assert set(final) >= COMMON
    per_iteration = cfg.env.num_envs * cfg.agent.num_steps
    assert [r["env_steps"] for r in records] == [per_iteration, 2 * per_iteration]


def test_a_learner_link_needs_an_algorithm_of_rollouts_or_replay_rows():
    from distrl.runner import roles

    class NoRollouts:
        remote = None
        strategy = type("S", (), {"role": Role(LEARN_FROM_ACTORS)})()

    with pytest.raises(TypeError, match=r"replay rows \(dqn, sac, td3\): NoRollouts takes neither"):
        roles.run(NoRollouts())  # type: ignore[arg-type]
