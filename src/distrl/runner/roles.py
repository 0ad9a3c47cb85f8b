"""The role loops: what one rank does every iteration, for the role its strategy gives it.

Every role runs the same sequence, and each step of it is one ``Runner`` method shared by all:

    liveness + LR schedule       runner.begin()
    collect | receive            runner.collect() | link.receive_rollouts() | the server's events
    learn | apply                runner.learn_step() (through strategy.step) | the server decides
    count                        runner.iteration += 1
    record                       runner.record(...)   (the one record builder)
    log                          runner.log(record)   (evaluation on the main rank, hooks)
    checkpoint when due          runner.checkpoint(...)

=====================  =================================  ======================================
role                   who                                 its link (the strategy object itself)
=====================  =================================  ======================================
``collect_and_learn``  allreduce ranks, ps-* workers       none: ``strategy.step``/``reduce_stats``
``serve``              a parameter server's rank 0          ``ServerLink``: iteration events
``learn_from_actors``  learner-actor's learners             ``LearnerLink``: rollouts in, weights
                                                            out, the actors' checkpoint states
``act``                learner-actor's actors               ``ActorLink``: weights in, rollouts
                                                            and checkpoint states out
``relay``              a parameter server's sink nodes      ``SinkLink``: its workers' rounds up,
                       (``--dist.ps.group-size``)           the server's messages down
=====================  =================================  ======================================

The strategy says which role a rank plays (``strategy.role``, a ``distributed.base.Role``) and
is that role's link; it holds no loop.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, cast

from distrl.distributed.base import (
    ACT,
    LEARN_FROM_ACTORS,
    RELAY,
    SERVE,
    ActorLink,
    LearnerLink,
    ServerLink,
    SinkLink,
)
from distrl.distributed.liveness import PeerFailure

if TYPE_CHECKING:  # annotations only: runner/base.py imports this module
    from distrl.runner.base import Runner


def run(runner: Runner) -> dict[str, Any]:
    """This rank's whole training loop, for its role; returns the last record."""
    strategy, loop = runner.strategy, runner.strategy.role.loop
    if loop == SERVE:
        return serve(runner, cast(ServerLink, strategy))
    if loop == LEARN_FROM_ACTORS:
        return learn_from_actors(runner, cast(LearnerLink, strategy))
    if loop == ACT:
        return act(runner, cast(ActorLink, strategy))
    if loop == RELAY:
        return relay(runner, cast(SinkLink, strategy))
    return collect_and_learn(runner)


def collect_and_learn(runner: Runner) -> dict[str, Any]:
    """Every rank under allreduce and elastic, a parameter server's workers: ``Runner.iterate``
    until done, then the replica check and ``strategy.finish`` (a worker tells its server).

    Where the strategy survives a lost peer (``strategy.recovery``: elastic), each iteration
    begins from a held copy of the training state; a peer lost inside it is survived by
    ``recover`` (the iteration discarded, or kept where this rank's update completed), and at
    the iteration's end ``boundary`` lets in the ranks waiting to join."""
    strategy, recovery = runner.strategy, runner.strategy.recovery
    record: dict[str, Any] = {}
    strategy.take_times()
    if recovery is not None:
        recovery.enter(runner)
    while not runner.done:
        held = runner.training_state(rank=False).copy() if recovery is not None else None
        try:
            record = runner.iterate()
            if recovery is not None:
                recovery.boundary(runner)
        except PeerFailure as e:
            if recovery is None or held is None:
                raise
            recovery.recover(runner, held, e)
    runner.finished()
    strategy.verify_replicas(runner.policy)
    strategy.finish()
    return record


def serve(runner: Runner, link: ServerLink) -> dict[str, Any]:
    """A parameter server: apply what the workers send until they finish; one record per
    iteration that every live worker completed; checkpoints when every live worker's state of
    that iteration has arrived. The algorithm takes in each statistics message as a collecting
    rank takes in ``reduce_stats`` (``Runner.absorb``) and decides the early stop."""
    layout = runner.stats_layout
    steps_before = runner.env_steps

    def on_stats(sums: Any, rows: Any, live: Any) -> None:
        runner.absorb(layout.agreed(sums, rows, live))

    record: dict[str, Any] = {}
    stop = lambda: runner.stop_early  # noqa: E731 (the server's view of every worker)
    for event in link.serve(on_stats, runner.iteration, stop, layout):
        if event.kind == "checkpoint":
            ranks = [event.states.get(r, {}) for r in range(runner.strategy.world_size)]
            runner.iteration = max(runner.iteration, event.iteration)
            runner.save(runner.wall_time(), ranks)
            continue
        m = event.metrics
        for text in m.pop("messages", []):
            runner.message(text)
        runner.iteration = event.iteration
        runner.schedule_lr()
        t_iter, wait = m.pop("time/iteration"), m["dist/server_wait"]
        metrics = runner.summary() | m
        steps, steps_before = runner.env_steps - steps_before, runner.env_steps
        rollout = metrics.get("time/rollout_max")  # the workers' (none for episodic suites)
        record = runner.record(t_iter, metrics, steps, rollout, comm=wait, learn=t_iter - wait)
        runner.log(record)
    runner.finished()
    for text in link.release():
        runner.message(text)
    return record


def relay(runner: Runner, link: SinkLink) -> dict[str, Any]:
    """A sink node: its workers' rounds go up as one, the server's answers come down to each,
    until the server says goodbye. It records nothing: the server records every iteration."""
    link.relay(runner.iteration, runner.stats_layout)
    for text in link.release():
        runner.message(text)
    return {}


def learn_from_actors(runner: Runner, link: LearnerLink) -> dict[str, Any]:
    """A learner: one rollout from each of its actors, the update (all-reduce among the
    learners), the new weights to the actors, a checkpoint (with the actors' states) when due."""
    rollouts = runner.remote
    if rollouts is None:
        raise TypeError(
            f"--dist.strategy learner-actor ships fixed-length rollouts (PPO) or replay rows "
            f"(dqn, sac, td3): {type(runner).__name__} takes neither"
        )
    strategy = runner.strategy
    strategy.take_times()
    link.version = runner.iteration  # fresh or resumed: every rank holds that version
    record: dict[str, Any] = {}
    while not runner.done:
        runner.begin()
        steps_before = runner.env_steps
        t0 = time.perf_counter()
        link.receive_rollouts(rollouts)
        t_wait = time.perf_counter() - t0
        metrics = runner.learn_step()
        t_update = time.perf_counter() - t0 - t_wait
        link.push_weights(stop=runner.stop_early)  # the actors stop with their learners
        runner.iteration += 1
        comm, _ = strategy.take_times()
        extra = link.take_metrics()
        for text in extra.pop("messages", []):
            runner.message(text)
        steps = runner.env_steps - steps_before
        rollout = metrics.get("time/rollout_max")  # the slowest of its actors
        record = runner.record(
            time.perf_counter() - t0, metrics | extra, steps, rollout, comm, 0.0, t_update - comm
        )
        runner.log(record)
        if runner.checkpoint_due():  # the states are gathered among the learners, to rank 0
            ranks = link.learner_states(runner.iteration, runner.rank_state()) or []
            runner.checkpoint(record["wall_time"], metrics.get("train/skipped_updates", 0), ranks)
    runner.finished()
    strategy.verify_replicas(runner.policy)
    strategy.finish()
    for text in link.release():
        runner.message(text)
    return record


def act(runner: Runner, link: ActorLink) -> dict[str, Any]:
    """An actor: wait for new enough weights, collect, send the rollout to its learner (and,
    when a checkpoint is due, this rank's state). Its records stay on this rank (hooks)."""
    collector = runner.collector  # PPO's; an off-policy runner sends its own transitions
    source: Any = collector if collector is not None else runner
    link.version = runner.iteration  # fresh or resumed: every rank holds that version
    record: dict[str, Any] = {}
    sent = -1  # the iteration of the last state this actor sent for a checkpoint
    while not runner.done:
        runner.begin()
        t0 = time.perf_counter()
        link.await_weights(runner.iteration - link.lag_bound)
        if link.stop_at is not None:  # the learners stopped (an interrupt)
            break
        t1 = time.perf_counter()
        runner.collect()
        if collector is not None:
            collector.episode_window(runner.iteration)
        t_rollout = time.perf_counter() - t1
        link.send_rollout(source, runner.iteration, t_rollout)
        runner.iteration += 1
        record = {
            "iteration": runner.iteration,
            "dist/version": link.version,
            "time/weight_wait": t1 - t0,
            "time/rollout": t_rollout,
        }
        if runner.checkpoint_due():  # before the hooks: a fault there must not lose the state
            link.send_state(runner.iteration, runner.rank_state())
            sent = runner.iteration
        runner.log(record)  # non-main ranks log nothing; hooks see every rank
    if link.stop_at is not None and sent != link.stop_at:
        # the learners' final checkpoint is of the iteration they stopped at: on-policy this
        # actor's state is of that iteration too; async, it may have collected further since
        link.send_state(link.stop_at, runner.rank_state())
    runner.strategy.finish()  # the final weights arrive here
    return record | {"dist/version": link.version}
