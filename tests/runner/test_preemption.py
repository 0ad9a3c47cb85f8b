"""DD-PPO's preemption threshold (``--dist.preempt-fraction``) in one process: the counter's
rules (threshold, minimum share, poll gate), a rollout cut short trains on what it collected
with the same number of minibatches, and the refusals before any process starts."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

from distrl.config import DistConfig, PolicyConfig, validate
from distrl.distributed import context, liveness, preemption
from distrl.distributed.preemption import Preemption, granularity
from distrl.distributed.strategies import make_strategy
from distrl.envs.registry import make_env
from distrl.runner.algorithms import check_compatible
from distrl.runner.on_policy import OnPolicyRunner
from distrl.storage.advantages import gae
from tests.distributed.workers import small_config


class CounterStore:
    """What the preemption reads and writes of the rendezvous store: counters."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.reads = 0

    def add(self, key: str, amount: int) -> int:
        self.reads += amount == 0
        self.counts[key] = self.counts.get(key, 0) + amount
        return self.counts[key]

    def delete_key(self, key: str) -> bool:
        return self.counts.pop(key, None) is not None


def test_the_threshold_the_minimum_share_and_the_poll_gate(monkeypatch):
    store = CounterStore()
    monkeypatch.setattr(liveness, "_store", lambda: store)
    monkeypatch.setattr(preemption, "POLL_S", 0.0)
    assert Preemption(0.6, 2, 1, 32, 1).needed == 2  # ceil(1.2): on 2 ranks, nobody is cut
    assert Preemption(0.5, 2, 1, 32, 1).needed == 1
    assert Preemption(0.6, 8, 1, 32, 1).needed == 5
    assert granularity(6, 4) == 2 and granularity(128, 2) == 1
    p = Preemption(0.5, 2, 1, 32, 3)
    assert p.min_steps == 9  # a quarter of 32 is 8, rounded up to whole minibatch rows
    p.begin(4)
    assert not p.now(12)  # nobody is done
    store.add("distrl/preempt/4", 1)  # the other rank finished its rollout
    assert not p.now(8) and not p.now(10)  # below the minimum share; not a multiple of 3
    assert p.now(12)
    assert not p.now(32)  # the whole rollout: nothing to cut
    monkeypatch.setattr(preemption, "POLL_S", 3600.0)
    p.begin(5)
    store.add("distrl/preempt/5", 1)
    reads = store.reads
    assert p.now(9)  # the first poll after the minimum share reads the store ...
    assert not p.now(12) and store.reads == reads + 1  # ... then not again within POLL_S
    p.finished()
    assert store.counts["distrl/preempt/5"] == 2
    Preemption(0.5, 2, 0, 32, 1).begin(6)  # rank 0 drops the counter before last
    assert "distrl/preempt/5" not in store.counts


class StopAt:
    """A preemption that cuts every rollout at ``t`` steps."""

    def __init__(self, t: int) -> None:
        self.t, self.finished_calls = t, 0

    def begin(self, iteration: int) -> None:
        pass

    def now(self, t: int) -> bool:
        return t >= self.t

    def finished(self) -> None:
        self.finished_calls += 1


class Snapshot:
    """Before each update: the buffer's head, and V of the state the rollout stopped at."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def before_update(self, runner: Any) -> None:
        c = runner.collector
        with torch.no_grad():
            last = runner.policy.value(c.obs, c.memory if runner.policy.recurrent else None)
        head = c.collected
        fields = ("rewards", "values", "terminated", "truncated", "final_values")
        self.seen.append({"last": last, **{f: getattr(head, f).clone() for f in fields}})

    def after_update(self, runner: Any, metrics: dict[str, Any]) -> None:
        self.seen[-1]["metrics"] = dict(metrics)

    def after_iteration(self, runner: Any, record: dict[str, Any]) -> bool:
        return True


@pytest.mark.timeout(60)
@pytest.mark.parametrize("recurrent", ["none", "gru"])
def test_a_cut_rollout_trains_on_its_steps_with_every_minibatch(recurrent):
    cfg = small_config(8, distributed=False, policy=PolicyConfig(recurrent=recurrent))
    cfg = dataclasses.replace(cfg, agent=dataclasses.replace(cfg.agent, num_steps=16))
    ctx = context.init(cfg)
    try:
        runner = OnPolicyRunner(cfg, make_strategy(cfg, ctx), make_env(cfg, ctx.device))
        c = runner.own_collector()
        c.preempt = cut = StopAt(5)
        snap = Snapshot()
        runner.hooks.append(snap)
        computed: list[torch.Tensor] = []
        advantages = runner.learner.advantages

        def spy(buf: Any, last_obs: torch.Tensor, memory: torch.Tensor) -> None:
            advantages(buf, last_obs, memory)
            computed.append(buf.advantages.clone())

        runner.learner.advantages = spy  # type: ignore[method-assign]
        record = runner.iterate()
        assert c.steps == 5 and cut.finished_calls == 0
        assert record["env_steps"] == 5 * 8  # what was collected, not num_steps x num_envs
        m = snap.seen[0]["metrics"]
        assert m["dist/preempted_steps"] == (16 - 5) * 8
        a = cfg.agent
        assert m["train/updates"] + m["train/skipped_updates"] <= a.num_epochs * a.num_minibatches
        assert m["train/updates"] == a.num_epochs * a.num_minibatches or m["train/early_stop"]
        s = snap.seen[0]  # the head's GAE bootstraps from V(s_5), the state it stopped at
        adv, ret = gae(*(s[f] for f in ("rewards", "values", "terminated", "truncated")),
                       s["final_values"], s["last"], a.gamma, a.gae_lambda)  # fmt: skip
        assert adv.shape == (5, 8) and torch.isfinite(ret).all()
        assert torch.equal(computed[0], adv)
        c.preempt = cut = StopAt(99)  # the next rollout is whole
        runner.iterate()
        assert c.steps == 16 and cut.finished_calls == 1
        assert runner.env_steps == 5 * 8 + 16 * 8
        windows = c.window[c.window[:, 2] >= 0, 2]
        assert torch.equal(windows, windows.sort().values)  # completions stay in order
    finally:
        context.shutdown()


def test_a_whole_buffer_is_its_own_head():
    cfg = small_config(4, distributed=False)
    runner = OnPolicyRunner(cfg, make_strategy(cfg, context.init(cfg)), make_env(cfg, "cpu"))
    try:
        buf = runner.buffer
        assert buf.head(buf.num_steps) is buf
        head = buf.head(3)
        assert head.obs.shape[0] == 3 and head.obs.data_ptr() == buf.obs.data_ptr()
        assert head.flat().obs.shape[0] == 3 * buf.num_envs
    finally:
        context.shutdown()


def _with_dist(cfg: Any, **dist: Any) -> Any:
    return dataclasses.replace(cfg, dist=dataclasses.replace(DistConfig(), **dist))


@pytest.mark.parametrize("fraction", [0.0, -0.5, 1.5, float("nan")])
def test_a_fraction_outside_0_1_is_refused_naming_the_fix(fraction):
    cfg = _with_dist(small_config(4, distributed=False), preempt_fraction=fraction)
    with pytest.raises(ValueError, match=r"--dist.preempt-fraction must be in \(0, 1\].*0.6"):
        validate(cfg)


@pytest.mark.parametrize(
    ("strategy", "task", "algorithm", "why"),
    [
        ("elastic", "cartpole", None, "does not compose with --dist.strategy elastic"),
        ("ps-bsp", "cartpole", None, "does not read --dist.preempt-fraction"),
        ("learner-actor", "cartpole", None, "does not read --dist.preempt-fraction"),
        ("allreduce", "reach10", None, "episodic RLOO, which collects no such rollout"),
        ("allreduce", "cartpole", "dqn", "DQN, which collects no such rollout"),
        ("allreduce", "cartpole", "pqn", "PQN, which collects no such rollout"),
    ],
)
def test_preemption_is_refused_where_it_does_not_compose(strategy, task, algorithm, why):
    cfg = small_config(4, distributed=True)
    cfg = dataclasses.replace(cfg, task=task, algorithm=algorithm)
    cfg = _with_dist(cfg, strategy=strategy, preempt_fraction=0.6)
    with pytest.raises(ValueError, match=why):
        check_compatible(cfg, 4)


def test_allreduce_takes_it():
    cfg = _with_dist(small_config(4, distributed=True), preempt_fraction=0.6)
    check_compatible(cfg, 2)
