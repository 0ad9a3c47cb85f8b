"""The tuned defaults table (``envs/tuned.py``) and the task table agree: one entry per built-in
task, each the factory the task uses, each config naming its own task."""

from __future__ import annotations

from distrl.envs import list_tasks
from distrl.envs.registry import is_user_task
from distrl.envs.tuned import GYM_TUNED, TUNED


def test_one_tuned_entry_per_builtin_task() -> None:
    builtin = {t.name: t for t in list_tasks() if not t.gymnasium and not is_user_task(t.name)}
    assert set(TUNED) == set(builtin)  # no task without defaults, no stale entry
    for name, task in builtin.items():
        assert task.default_config is TUNED[name]
        assert TUNED[name]().task == name


def test_a_tuned_gymnasium_id_names_the_task_it_is_built_for() -> None:
    for env_id, tuned in GYM_TUNED.items():
        assert tuned(f"gym:{env_id}")().task == f"gym:{env_id}"
