"""PettingZoo's Parallel API as a distrl ``VecEnv``: every agent of every env copy is one row of
the batch, and one policy, shared by all agents, acts for every row (parameter sharing, as
MAPPO trains MPE's cooperative tasks).

``ParallelVecEnv(make, num_envs, device)`` steps ``num_envs`` copies of ``make()`` (a
``pettingzoo.ParallelEnv``) with A agents each, so the VecEnv has ``num_envs * A`` rows: copy
``i``'s agent ``j`` (in ``possible_agents`` order) is row ``i * A + j``.

- **Spaces.** Every agent's observation space must have one shape (a shared policy reads them
  all): a ``Box`` (flattened to float32), or PettingZoo's ``Dict`` of ``observation`` (a Box) and
  ``action_mask`` (the classic games'), whose mask goes last in the row with
  ``ActionSpace.mask_in_obs`` set, so that illegal actions get no probability. ``agent_id``
  appends each agent's one-hot index (for agents whose observations alone do not say which they
  are). Actions: one ``Discrete(n)`` or one 1-D ``Box`` for all agents. Anything else is
  refused at construction, naming the space.
- **Episodes.** A copy's episode ends when all its agents are done (terminated or truncated) or
  none is left; every agent's row then ends its episode in the same step (``terminated`` where
  the agent terminated, else ``truncated``, bootstrapped from ``final_obs``), and the copy is
  reset with a seed drawn from the env's generator. An agent that leaves before the others
  has a zero observation and a zero reward until its copy ends.
- **Per-agent returns.** ``agent_returns()`` gives the mean return of each agent over its last
  100 episodes; the ``AgentReturns`` hook puts them in the records (``agent/<name>/return``).

PettingZoo envs keep their state in Python objects: a resumed run starts new episodes (as a
Gymnasium task does).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from distrl.envs.core import ActionSpace, VecEnv
from distrl.hooks import Hooks
from distrl.install import pip_install

HINT = f"install distrl's multiagent extra (pettingzoo, mpe2): {pip_install('multiagent')}"


def _spaces(env: Any) -> tuple[Any, int, bool, ActionSpace]:
    """(observation Box, its size, whether a Dict carries an action mask, the ActionSpace) of
    ``env``'s agents, refused unless every agent has the same ones."""
    from gymnasium import spaces

    agents = list(env.possible_agents)
    obs_spaces = [env.observation_space(a) for a in agents]
    act_spaces = [env.action_space(a) for a in agents]
    first, action = obs_spaces[0], act_spaces[0]
    if any(s != first for s in obs_spaces) or any(s != action for s in act_spaces):
        raise ValueError(
            "the agents of this PettingZoo env have different observation or action spaces; one "
            "policy shared by every agent needs them equal (a policy per group is not built)"
        )
    masked = False
    if isinstance(first, spaces.Dict):
        if set(first.spaces) != {"observation", "action_mask"}:
            raise ValueError(
                f"a Dict observation must hold exactly 'observation' and 'action_mask' (as "
                f"PettingZoo's classic games), got keys {sorted(first.spaces)}"
            )
        masked, first = True, first.spaces["observation"]
    if not isinstance(first, spaces.Box):
        raise ValueError(f"observation space {first}: a Box (or Box and action_mask) is needed")
    size = int(np.prod(first.shape))
    if isinstance(action, spaces.Discrete):
        return first, size, masked, ActionSpace("discrete", n=int(action.n), mask_in_obs=masked)
    if masked:
        raise ValueError("an action mask needs Discrete actions")
    if isinstance(action, spaces.Box) and len(action.shape) == 1:
        low, high = tuple(map(float, action.low)), tuple(map(float, action.high))
        return first, size, False, ActionSpace("continuous", low=low, high=high)
    raise ValueError(f"action space {action}: Discrete or a 1-D Box is needed")


class ParallelVecEnv(VecEnv):
    """``num_envs`` copies of a PettingZoo ParallelEnv, every agent a row (module docstring)."""

    def __init__(self, make: Callable[[], Any], num_envs: int, device: torch.device | str,
                 max_episode_steps: int | None = None, agent_id: bool = False) -> None:  # fmt: skip
        self.copies = [make() for _ in range(num_envs)]
        first = self.copies[0]
        self.agents = list(first.possible_agents)
        self.index = {a: j for j, a in enumerate(self.agents)}  # agent -> its row in a copy
        self.A = len(self.agents)
        _, self.size, self.masked, self.action_space = _spaces(first)
        self.agent_id = agent_id
        self.n_actions = self.action_space.n
        self.obs_dim = (
            self.size + (self.A if agent_id else 0) + (self.n_actions if self.masked else 0)
        )
        self.num_envs = num_envs * self.A
        self.device = torch.device(device)
        self.max_episode_steps = max_episode_steps
        self.elapsed = np.zeros(num_envs, dtype=np.int64)
        self.rng = np.random.default_rng()
        self.returns = np.zeros((num_envs, self.A))
        self.finished: list[deque[float]] = [deque(maxlen=100) for _ in self.agents]
        self.last = np.zeros((self.num_envs, self.obs_dim), dtype=np.float32)

    # ---- rows
    def _rows(self, i: int, obs: dict[str, Any]) -> np.ndarray:
        """Copy ``i``'s observation rows [A, obs_dim] (zeros for an agent that left)."""
        out = np.zeros((self.A, self.obs_dim), dtype=np.float32)
        for j, agent in enumerate(self.agents):
            if agent not in obs:
                continue
            o = obs[agent]
            values = o["observation"] if self.masked else o
            out[j, : self.size] = np.asarray(values, dtype=np.float32).reshape(-1)
            at = self.size
            if self.agent_id:
                out[j, at + j] = 1.0
                at += self.A
            if self.masked:
                out[j, at:] = np.asarray(o["action_mask"], dtype=np.float32)
        return out

    def _reset_copy(self, i: int) -> np.ndarray:
        obs, _ = self.copies[i].reset(seed=int(self.rng.integers(2**31)))
        self.elapsed[i] = 0
        self.returns[i] = 0.0
        return self._rows(i, obs)

    # ---- VecEnv
    def reset(self, seed: int | None = None) -> torch.Tensor:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        for i in range(len(self.copies)):
            self.last[i * self.A : (i + 1) * self.A] = self._reset_copy(i)
        return torch.as_tensor(self.last.copy(), device=self.device)

    def step(
        self, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        acts = actions.detach().cpu().numpy()
        N, A = len(self.copies), self.A
        reward = np.zeros(N * A, dtype=np.float32)
        terminated = np.zeros(N * A, dtype=bool)
        truncated = np.zeros(N * A, dtype=bool)
        final = self.last.copy()
        for i, env in enumerate(self.copies):
            step = {a: acts[i * A + self.index[a]] for a in env.agents}
            if self.action_space.discrete:
                step = {a: int(v) for a, v in step.items()}
            obs, rew, term, trunc, _ = env.step(step)
            self.elapsed[i] += 1
            rows = self._rows(i, obs)
            for j, agent in enumerate(self.agents):
                r = float(rew.get(agent, 0.0))
                reward[i * A + j] = r
                self.returns[i, j] += r
            final[i * A : (i + 1) * A] = rows
            limit = self.max_episode_steps is not None and self.elapsed[i] >= self.max_episode_steps
            over = not env.agents or all(
                term.get(a, True) or trunc.get(a, True) for a in self.agents
            ) or limit  # fmt: skip
            if over:
                for j, agent in enumerate(self.agents):
                    ended = bool(term.get(agent, False)) and not limit
                    terminated[i * A + j] = ended
                    truncated[i * A + j] = not ended
                    self.finished[j].append(float(self.returns[i, j]))
                rows = self._reset_copy(i)
            self.last[i * A : (i + 1) * A] = rows
        info = {"final_obs": torch.as_tensor(final, device=self.device)}
        return (
            torch.as_tensor(self.last.copy(), device=self.device),
            torch.as_tensor(reward, device=self.device),
            torch.as_tensor(terminated, device=self.device),
            torch.as_tensor(truncated, device=self.device),
            info,
        )

    def agent_returns(self) -> dict[str, float]:
        """Each agent's mean return over its last 100 finished episodes."""
        return {a: float(np.mean(d)) for a, d in zip(self.agents, self.finished, strict=True) if d}

    def close(self) -> None:
        for env in self.copies:
            env.close()


class AgentReturns(Hooks):
    """Each agent's mean episode return (``ParallelVecEnv.agent_returns``) in the records, as
    ``agent/<name>/return``."""

    def on_record(self, runner: Any, record: dict[str, Any]) -> None:
        env = getattr(runner, "env", None)
        if isinstance(env, ParallelVecEnv):
            for name, value in env.agent_returns().items():
                record[f"agent/{name}/return"] = value


def mpe_spread(num_envs: int, device: torch.device | str,
               max_episode_steps: int | None = None) -> ParallelVecEnv:  # fmt: skip
    """MPE2's ``simple_spread_v3``: 3 agents cover 3 landmarks (discrete moves, 25 steps)."""
    try:
        from mpe2 import simple_spread_v3
    except ImportError as e:
        raise ImportError(f"task mpe-spread needs MPE2: {HINT}") from e

    def make() -> Any:
        return simple_spread_v3.parallel_env(N=3, max_cycles=25, continuous_actions=False)

    return ParallelVecEnv(make, num_envs, device, max_episode_steps)
