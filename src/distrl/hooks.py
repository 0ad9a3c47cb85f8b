"""Callbacks around the update and after each iteration (inspection, logging, stopping early,
fault injection).

A runner calls the hooks it was built with, in order: ``distrl.train(cfg, hooks=[...])`` passes
them in one process, and ``register_task(..., hooks=[...])`` ties them to a task, so that ranks
started by torchrun get them by importing the registering module (``distrl train --import
MODULE TASK``). Every method is a no-op here: subclass and override what you need.

Stopping early, as Stable-Baselines3's callbacks do: return False from ``after_iteration`` (as
from SB3's ``_on_step``), or call ``runner.request_stop(reason)`` from any method. Every rank
agrees on the stop in the exchange each iteration already makes (the one an interrupt travels
in), and the run ends as after its last iteration: a final checkpoint, exit code 0, and
``stopped`` (the reason) in the last record and in ``TrainResult.metrics``. One process stops
after the current iteration; ranks learn of a stop in the next iteration's exchange and all
stop after that one. ``distrl.EvalCallback`` (``distrl.evaluation``) evaluates as it trains.

The class lives here, in a module that imports nothing of distrl at run time (``Runner`` only for
the type checker), because a task carries its hooks: ``envs/registry.py`` checks and stores them,
and the env, policy, storage and algorithm packages never import the runner
(``tests/test_layers.py``). ``distrl.runner.hooks`` re-exports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from distrl.runner.base import Runner


class Hooks:
    def on_training_start(self, runner: Runner) -> None:
        """Once, before the first iteration (after a resume's checkpoint is loaded)."""

    def before_update(self, runner: Runner) -> None:
        """After the rollout (and its finiteness check), before advantages and the update."""

    def after_update(self, runner: Runner, metrics: dict[str, Any]) -> None:
        """After the update and the normalizer, before ``runner.iteration`` advances."""

    def on_record(self, runner: Runner, record: dict[str, Any]) -> None:
        """The iteration's record before it is logged (every role): keys added here reach
        metrics.jsonl, TensorBoard and W&B with the rest."""

    def after_iteration(self, runner: Runner, record: dict[str, Any]) -> bool | None:
        """After an iteration's record is logged (every role, the server's too). Return False
        to stop training early (``runner.request_stop``); None or True goes on."""
        return None
