"""Hook points around the update, for tests and extensions (fault injection, inspection).

A runner calls every hook in ``HOOKS`` (process-wide: a test's ``sitecustomize`` can install one
before any runner exists) and then those it was built with. Every method is a no-op here.
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


HOOKS: list[Hooks] = []
