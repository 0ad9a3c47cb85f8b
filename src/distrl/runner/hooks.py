"""The runner's callbacks, ``Hooks``: defined in ``distrl.hooks`` (a module the env registry may
import, as a task carries its hooks) and re-exported here for the runner and existing callers."""

from __future__ import annotations

from distrl.hooks import Hooks

__all__ = ["Hooks"]
