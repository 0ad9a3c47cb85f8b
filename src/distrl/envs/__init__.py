"""Vectorized environments: the VecEnv contract, built-in batched torch envs, Gymnasium adapter.

``make_env(cfg, device)`` builds the env of ``cfg.task``; ``get_task`` / ``list_tasks`` expose the
task registry (``gym:<Id>`` for any Gymnasium environment).
"""

from distrl.envs.core import ActionSpace, VecEnv
from distrl.envs.registry import Task, default_config, get_task, list_tasks, make_env

__all__ = ["ActionSpace", "Task", "VecEnv", "default_config", "get_task", "list_tasks", "make_env"]
