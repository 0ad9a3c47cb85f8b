"""A fault-injecting VecEnv for reliability tests: built-in CartPole that fails on cue.

``FaultyEnv`` steps a real ``CartPole`` and, at chosen global steps (the env's own step count,
0-based, which a resume restores), either raises or corrupts one env's output:

  raise_at = [(step, env_index)]          step() raises ``EnvFault`` ("env {i} failed"), a
                                          RuntimeError that carries ``env_index`` and ``step``
  nan_at   = [(step, env_index, field)]   that env's ``obs`` row or ``reward`` becomes NaN
  inf_at   = [(step, env_index, field)]   ... becomes +Inf

The corrupted values are copies: the wrapped env's state stays finite, so the fault shows up only
where it was injected. The registry's test tasks expose it as task ``faulty-cartpole``: never listed
by ``distrl list``, available only while the ``DISTRL_FAULTS`` environment variable is set, which
also says where the faults go; see ``parse_faults``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from distrl.envs.cartpole import CartPole
from distrl.envs.core import VecEnv

FIELDS = ("obs", "reward")
FAULTS_ENV_VAR = "DISTRL_FAULTS"


class EnvFault(RuntimeError):
    """The injected failure; ``env_index`` and ``step`` say which env failed when."""

    def __init__(self, env_index: int, step: int) -> None:
        super().__init__(f"env {env_index} failed")
        self.env_index = env_index
        self.step = step

    def __reduce__(self):  # picklable despite the two-argument __init__
        return (type(self), (self.env_index, self.step))


class FaultyEnv(VecEnv):
    def __init__(
        self,
        num_envs: int,
        device: torch.device | str = "cpu",
        max_episode_steps: int | None = None,
        raise_at: Sequence[tuple[int, int]] = (),
        nan_at: Sequence[tuple[int, int, str]] = (),
        inf_at: Sequence[tuple[int, int, str]] = (),
    ) -> None:
        self.inner = CartPole(num_envs, device, max_episode_steps)
        self.num_envs = self.inner.num_envs
        self.obs_dim = self.inner.obs_dim
        self.action_space = self.inner.action_space
        self.device = self.inner.device
        self.max_episode_steps = self.inner.max_episode_steps
        self.raise_at: dict[int, list[int]] = {}
        for step, i in raise_at:
            self._check_index(i)
            self.raise_at.setdefault(int(step), []).append(int(i))
        self.corrupt_at: dict[int, list[tuple[int, str, float]]] = {}
        for faults, value in ((nan_at, float("nan")), (inf_at, float("inf"))):
            for step, i, field in faults:
                self._check_index(i)
                if field not in FIELDS:
                    raise ValueError(f"fault field must be one of {FIELDS}, got {field!r}")
                self.corrupt_at.setdefault(int(step), []).append((int(i), field, value))

    def _check_index(self, i: int) -> None:
        if not 0 <= i < self.num_envs:
            raise ValueError(f"fault env index {i} is outside 0..{self.num_envs - 1}")

    @property
    def step_count(self) -> int:
        """Global step index of the next ``step`` call (0-based)."""
        return self.inner.total_steps

    def reset(self, seed: int | None = None) -> torch.Tensor:
        return self.inner.reset(seed)

    def step(
        self, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        step = self.step_count
        if step in self.raise_at:
            raise EnvFault(self.raise_at[step][0], step)
        obs, reward, terminated, truncated, info = self.inner.step(actions)
        for i, field, value in self.corrupt_at.get(step, ()):
            if field == "obs":
                obs = obs.clone()  # obs may alias the inner env's state: never write into it
                obs[i] = value
            else:
                reward = reward.clone()
                reward[i] = value
        return obs, reward, terminated, truncated, info

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)


def parse_faults(spec: str) -> dict[str, list[tuple]]:
    """``DISTRL_FAULTS`` syntax -> FaultyEnv keyword arguments, for this process's rank.

    Items separated by ``;``:  ``raise:STEP:ENV``, ``nan:STEP:ENV:FIELD``, ``inf:STEP:ENV:FIELD``
    (FIELD is ``obs`` or ``reward``), each optionally suffixed ``@RANK`` to apply on that global
    rank only. Example: ``raise:5:3@1;nan:7:1:reward`` (rank 1 raises in env 3 at step 5; every
    rank gets a NaN reward in env 1 at step 7). ``rank`` is taken from ``RANK`` (torchrun's).
    """
    import os

    rank = int(os.environ.get("RANK", "0"))
    out: dict[str, list[tuple]] = {"raise_at": [], "nan_at": [], "inf_at": []}
    for item in filter(None, (s.strip() for s in spec.split(";"))):
        body, _, only = item.partition("@")
        parts = body.split(":")
        try:
            if only and int(only) != rank:
                continue
            kind = parts[0]
            if kind == "raise" and len(parts) == 3:
                out["raise_at"].append((int(parts[1]), int(parts[2])))
            elif kind in ("nan", "inf") and len(parts) == 4 and parts[3] in FIELDS:
                out[f"{kind}_at"].append((int(parts[1]), int(parts[2]), parts[3]))
            else:
                raise ValueError
        except ValueError:
            raise ValueError(
                f"bad {FAULTS_ENV_VAR} item {item!r}; use raise:STEP:ENV, nan:STEP:ENV:FIELD or "
                f"inf:STEP:ENV:FIELD (FIELD obs|reward), optionally suffixed @RANK"
            ) from None
    return out


def from_environment(
    num_envs: int, device: torch.device | str, max_episode_steps: int | None = None
) -> FaultyEnv:
    """The registry's factory: faults from ``DISTRL_FAULTS`` (none when unset)."""
    import os

    return FaultyEnv(
        num_envs, device, max_episode_steps, **parse_faults(os.environ.get(FAULTS_ENV_VAR, ""))
    )
