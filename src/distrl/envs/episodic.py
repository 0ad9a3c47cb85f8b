"""The episodic extension of the VecEnv contract: episodes that start from chosen init states.

Multi-task episodic training (RIPT, Tan et al. 2025, on LIBERO) gives every task a fixed list of
init states and starts each episode from one picked by a cursor, so that the K rollouts of an
RLOO group share their start. An ``EpisodicVecEnv`` is a ``VecEnv`` (same shapes, same same-step
auto-reset, which draws a random state of the list) plus:

  num_init_states            length of the init-state list (indices 0 .. num_init_states - 1)
  reset_rows(mask, indices)  rows where mask [N] bool is set start a new episode from init state
                             indices[row] [N] int64; other rows are untouched (their index
                             entries are ignored); returns obs [N, obs_dim]
  info["success"]            [N] bool from ``step``: the episode that ended on this step (or goes
                             on) has reached its goal; success terminates the episode

Every suite also has a held-out list per task (``make_task_env(..., held_out=True)``): as many
init states, drawn apart from the training list (reach10: another seed of the same generator;
MT10: another seed of Meta-World's goal sampling). Training and demonstrations use the training
list only; ``distrl.evaluation.evaluate_suite`` runs the held-out one, as the field reports
success (per task, over a fixed set of goal positions the policy never trained on).

Envs never import the distributed package, never log and never touch files (beyond reading the
init-state lists they ship).
"""

from __future__ import annotations

import difflib
from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from distrl.config import EnvConfig
from distrl.envs.core import VecEnv


class EpisodicVecEnv(VecEnv):
    """A VecEnv whose episodes can start from chosen entries of a fixed init-state list."""

    num_init_states: int
    max_episode_steps: int  # every episode ends within it

    @abstractmethod
    def reset_rows(self, mask: torch.Tensor, init_indices: torch.Tensor) -> torch.Tensor:
        """Restart the rows in ``mask`` [N] from init states ``init_indices`` [N]; obs [N, D]."""

    def reset_to(self, init_indices: torch.Tensor, seed: int | None = None) -> torch.Tensor:
        """Reset every row, row i from init state ``init_indices[i]``. Returns obs [N, obs_dim]."""
        self.reset(seed)
        mask = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        return self.reset_rows(mask, init_indices.to(self.device))


@dataclass(frozen=True)
class EpisodicSuite:
    """A multi-task suite of episodic tasks (what ``runner/episodic.py`` trains): task names in
    a fixed order (task id = position) and ``make_task_env(name, num_envs, device,
    max_episode_steps, held_out=False)``, one ``EpisodicVecEnv`` running that task from its
    training init states (``held_out=True``: from its held-out ones)."""

    task_names: tuple[str, ...]
    make_task_env: Callable[..., EpisodicVecEnv]
    pooled: bool = False
    """``make_task_env`` also takes ``vectorization`` and ``num_workers`` (--env.vectorization
    async: the rows stepped in a pool of subprocesses, ``envs/episodic_pool.py``)."""

    def make_training_env(
        self, name: str, num_envs: int, device: torch.device, env: EnvConfig
    ) -> EpisodicVecEnv:
        """Task ``name``'s training env as --env.* asks (its time limit; how its rows are
        stepped where the suite is ``pooled``)."""
        how = {"vectorization": env.vectorization, "num_workers": env.num_workers}
        return self.make_task_env(
            name, num_envs, device, env.max_episode_steps, **(how if self.pooled else {})
        )

    def select(self, names: Sequence[str], flag: str = "--multitask.tasks") -> tuple[str, ...]:
        """The tasks to train, in suite order: ``names`` (every task when empty); ``flag``
        names the option they came from in the errors."""
        unknown = [n for n in names if n not in self.task_names]
        if unknown:
            named = []
            for n in unknown:
                close = difflib.get_close_matches(n, self.task_names, n=3, cutoff=0.6)
                named.append(n + (f" (did you mean {' or '.join(close)}?)" if close else ""))
            raise ValueError(
                f"{flag}: {', '.join(named)} not in this suite; its tasks are "
                f"{', '.join(self.task_names)} (leave {flag} out for all of them)"
            )
        if len(set(names)) != len(names):
            raise ValueError(f"{flag} names a task twice: {list(names)}")
        return tuple(n for n in self.task_names if not names or n in names)
