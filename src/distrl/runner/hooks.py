"""Callbacks around the update and after each iteration (inspection, fault injection, logging).

A runner calls the hooks it was built with, in order: ``distrl.train(cfg, hooks=[...])`` passes
them in one process, and ``register_task(..., hooks=[...])`` ties them to a task, so that ranks
started by torchrun get them by importing the registering module (``distrl train --import
MODULE TASK``). Every method is a no-op here: subclass and override what you need.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from distrl.runner.base import Runner


class Hooks:
    def before_update(self, runner: Runner) -> None:
        """After the rollout (and its finiteness check), before advantages and the update."""

    def after_update(self, runner: Runner, metrics: dict[str, Any]) -> None:
        """After the update and the normalizer, before ``runner.iteration`` advances."""

    def after_iteration(self, runner: Runner, record: dict[str, Any]) -> None:
        """After an iteration's record is logged (every role, the server's too)."""
