"""PettingZoo's Parallel API as a distrl ``VecEnv``: every agent of every env copy is one row of
the batch, and the agents fall into groups (``adversary_0`` and ``adversary_1`` in one, ``agent_0``
in another), each acted for by one policy: all groups by one shared policy (parameter sharing, as
MAPPO trains MPE's cooperative tasks; ``--policy.mapping shared``, the default), or each group by
its own (``--policy.mapping per-group``, RLlib's policy mapping by agent type).

``ParallelVecEnv(make, num_envs, device)`` steps ``num_envs`` copies of ``make()`` (a
``pettingzoo.ParallelEnv``) with A agents each, so the VecEnv has ``num_envs * A`` rows: copy
``i``'s agent ``j`` (in ``possible_agents`` order) is row ``i * A + j``.

- **Groups.** ``groups`` maps an agent's name to its group's (default ``agent_group``: the name
  without a trailing ``_<number>``, as PettingZoo names its agents). With two groups or more,
  each row starts with its group's one-hot (``policy_groups`` names them, in order of first
  appearance), left as it is by the observation normalizer, so that a shared policy knows each
  agent's role and a per-group policy routes the row to its group's networks.
- **Spaces.** The agents of one group must have the same spaces. An observation is a ``Box``
  (flattened to float32), or PettingZoo's ``Dict`` of ``observation`` (a Box) and
  ``action_mask`` (the classic games'), whose mask goes last in the row with
  ``ActionSpace.mask_in_obs`` set, so that illegal actions get no probability. Groups may differ
  in their observation's size (the rows are padded with zeros to the widest) and in their number
  of discrete actions (the policy has the most; a group's actions beyond its own are masked
  out, as illegal ones are). ``agent_id`` appends each agent's one-hot index (for agents whose
  observations alone do not say which they are). Actions: ``Discrete`` or one 1-D ``Box``,
  the same Box for every agent. Anything else is refused at construction, naming the space.
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

import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from distrl.envs.core import ActionSpace, VecEnv
from distrl.hooks import Hooks
from distrl.install import pip_install

HINT = f"install distrl's multiagent extra (pettingzoo, mpe2): {pip_install('multiagent')}"


def agent_group(agent: str) -> str:
    """The default group of an agent: its name without a trailing ``_<number>``
    (``adversary_0`` -> ``adversary``)."""
    return re.sub(r"_\d+$", "", agent)


@dataclass(frozen=True)
class AgentSpace:
    """One agent's part of a row: its observation's size, whether a Dict carries its action
    mask, and its number of discrete actions (0: continuous)."""

    size: int
    masked: bool
    n: int


def _agent_space(agent: str, obs: Any, action: Any) -> AgentSpace:
    """``agent``'s observation and action spaces, refused unless distrl can read them."""
    from gymnasium import spaces

    masked = False
    if isinstance(obs, spaces.Dict):
        if set(obs.spaces) != {"observation", "action_mask"}:
            raise ValueError(
                f"agent {agent!r}: a Dict observation must hold exactly 'observation' and "
                f"'action_mask' (as PettingZoo's classic games), got keys {sorted(obs.spaces)}"
            )
        masked, obs = True, obs.spaces["observation"]
    if not isinstance(obs, spaces.Box):
        raise ValueError(
            f"agent {agent!r}: observation space {obs}: a Box (or Box and action_mask) is needed"
        )
    if isinstance(action, spaces.Discrete):
        return AgentSpace(int(np.prod(obs.shape)), masked, int(action.n))
    if masked:
        raise ValueError(f"agent {agent!r}: an action mask needs Discrete actions")
    if isinstance(action, spaces.Box) and len(action.shape) == 1:
        return AgentSpace(int(np.prod(obs.shape)), False, 0)
    raise ValueError(f"agent {agent!r}: action space {action}: Discrete or a 1-D Box is needed")


def _action_space(env: Any, agents: list[str], own: list[AgentSpace]) -> ActionSpace:
    """The policy's actions for every row: the most discrete actions of any agent (masked where
    an agent has fewer or a Dict carries a mask), or the one Box every agent shares."""
    if all(s.n for s in own):
        n = max(s.n for s in own)
        masked = any(s.masked or s.n < n for s in own)
        return ActionSpace("discrete", n=n, mask_in_obs=masked)
    box = env.action_space(agents[0])
    if any(s.n for s in own) or any(env.action_space(a) != box for a in agents):
        raise ValueError(
            "the agents of this PettingZoo env mix action spaces ("
            + ", ".join(f"{a}: {env.action_space(a)}" for a in agents)
            + "); continuous actions must be the same Box for every agent"
        )
    low, high = tuple(map(float, box.low)), tuple(map(float, box.high))
    return ActionSpace("continuous", low=low, high=high)


def _groups(env: Any, agents: list[str], group: Callable[[str], str]) -> list[str]:
    """Each agent's group (refused where the agents of one group have different spaces)."""
    names = [str(group(a)) for a in agents]
    for g in dict.fromkeys(names):
        members = [a for a, name in zip(agents, names, strict=True) if name == g]
        first = members[0]
        for a in members[1:]:
            if (env.observation_space(a), env.action_space(a)) != (
                env.observation_space(first), env.action_space(first)
            ):  # fmt: skip
                raise ValueError(
                    f"agents {first!r} and {a!r} of group {g!r} have different observation or "
                    f"action spaces; the agents of a group share a policy, so they need equal "
                    f"ones (register the task with groups= mapping them to different groups)"
                )
    return names


class ParallelVecEnv(VecEnv):
    """``num_envs`` copies of a PettingZoo ParallelEnv, every agent a row (module docstring)."""

    def __init__(self, make: Callable[[], Any], num_envs: int, device: torch.device | str,
                 max_episode_steps: int | None = None, agent_id: bool = False,
                 groups: Callable[[str], str] | None = None) -> None:  # fmt: skip
        self.copies = [make() for _ in range(num_envs)]
        first = self.copies[0]
        self.agents = list(first.possible_agents)
        self.index = {a: j for j, a in enumerate(self.agents)}  # agent -> its row in a copy
        self.A = len(self.agents)
        names = _groups(first, self.agents, groups or agent_group)
        self.policy_groups = tuple(dict.fromkeys(names))
        """The agents' groups, in order of first appearance (one policy each under
        ``--policy.mapping per-group``); with two or more, each row starts with its one-hot."""
        self.group_of = np.array([self.policy_groups.index(g) for g in names])
        self.own = [
            _agent_space(a, first.observation_space(a), first.action_space(a)) for a in self.agents
        ]
        self.action_space = _action_space(first, self.agents, self.own)
        self.masked = self.action_space.mask_in_obs
        self.agent_id = agent_id
        self.n_actions = self.action_space.n
        K = len(self.policy_groups)
        self.group_width = K if K > 1 else 0
        self.size = max(s.size for s in self.own)
        self.obs_dim = (
            self.group_width + self.size + (self.A if agent_id else 0)
            + (self.n_actions if self.masked else 0)
        )  # fmt: skip
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
        G = self.group_width
        for j, agent in enumerate(self.agents):
            if agent not in obs:
                continue
            o, own = obs[agent], self.own[j]
            if G:
                out[j, self.group_of[j]] = 1.0
            values = o["observation"] if own.masked else o
            out[j, G : G + own.size] = np.asarray(values, dtype=np.float32).reshape(-1)
            at = G + self.size
            if self.agent_id:
                out[j, at + j] = 1.0
                at += self.A
            if self.masked:
                out[j, at : at + own.n] = (
                    np.asarray(o["action_mask"], dtype=np.float32) if own.masked else 1.0
                )
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


def mpe(name: str, num_envs: int, device: torch.device | str,
        max_episode_steps: int | None = None) -> ParallelVecEnv:  # fmt: skip
    """An MPE2 task with discrete moves: ``spread`` (``simple_spread_v3``: 3 agents cover 3
    landmarks, 25 steps) or ``speaker-listener`` (``simple_speaker_listener_v4``: a speaker that
    sees the goal's colour and a listener that hears it, two groups, 25 steps)."""
    try:
        from mpe2 import simple_speaker_listener_v4, simple_spread_v3
    except ImportError as e:
        raise ImportError(f"task mpe-{name} needs MPE2: {HINT}") from e

    def make() -> Any:
        if name == "spread":
            return simple_spread_v3.parallel_env(N=3, max_cycles=25, continuous_actions=False)
        return simple_speaker_listener_v4.parallel_env(max_cycles=25, continuous_actions=False)

    return ParallelVecEnv(make, num_envs, device, max_episode_steps)
