"""``MinAtarEnv``: what the five MinAtar games share (sticky actions, resets, time limit, RNG).

A game is a pure function of tensors: ``initial_state(u)`` and ``dynamics(state, action, u)`` take
the uniform random numbers ``u`` they consume as an argument and draw nothing themselves, and
``observe(state)`` renders the 10x10xC grid. The env draws every step's uniforms in one
``torch.rand`` call (``step``), or takes them from its caller (``step_with_uniforms``): that is
how the parity tests replay the reference implementation's own random draws into this one.

Each game's uniforms are a fixed number of columns whether the reference would draw them this step
or not (a spawn that is not due leaves its columns unread), so the generator's consumption never
depends on the state, no row waits for another, and a resumed run continues bit for bit.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import numpy as np
import torch

from distrl.envs import draw
from distrl.envs.core import ActionSpace, VecEnv, check_saved_shape

State = dict[str, torch.Tensor]
"""A batch of game states: named tensors whose first dimension is the env."""

# The reference's full action set; a game's minimal set is a tuple of these ids.
NOOP, LEFT, UP, RIGHT, DOWN, FIRE = range(6)
ACTION_NAMES = ("n", "l", "u", "r", "d", "f")

STICKY_ACTION_PROB = 0.1
"""MinAtar's default: with this probability an env repeats its previous action instead."""


def select(mask: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``torch.where(mask, a, b)`` for ``a``, ``b`` of one bool or integer dtype (``mask``
    broadcasts). On CPU, for large tensors, as bit operations, b ^ ((a ^ b) & -mask): torch.where's
    CPU kernel ran 5-20x slower than that on this project's machine for the [N, K] tables the
    games keep (under 8192 elements the one torch.where call is cheaper)."""
    if a.device.type != "cpu" or a.is_floating_point() or max(a.numel(), b.numel()) < 8192:
        return torch.where(mask, a, b)  # small: one op beats five
    if a.dtype == torch.bool:
        return select(mask, a.view(torch.uint8), b.view(torch.uint8)).view(torch.bool)
    return b ^ ((a ^ b) & -mask.to(a.dtype))


def select_rows(mask: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Rows of ``a`` where ``mask`` [N] is set, rows of ``b`` elsewhere (``a``, ``b``: [N, ...]).

    On CPU, for large ``b``, a copy of ``b`` with the few masked rows of ``a`` copied in: one
    pass over the data instead of three (on CPU the row list costs no device round trip)."""
    if a.device.type == "cpu" and b.numel() >= 8192:
        rows = mask.nonzero().squeeze(1)
        return b.clone().index_copy_(0, rows, a.index_select(0, rows))
    return select(mask.view(-1, *([1] * (a.dim() - 1))), a, b)


def any_rows(mask: torch.Tensor) -> torch.Tensor:
    """``mask.any(1)`` for bool [N, K]; on CPU with K a multiple of 8, the rows read as K/8
    int64 words (any byte set: the largest word is positive), about 9x faster than ``any``."""
    k = mask.shape[1]
    if mask.device.type != "cpu" or k % 8 or not mask.is_contiguous():
        return mask.any(1)
    return mask.view(torch.int64).amax(1) != 0


def uniform_int(u: torch.Tensor, n: torch.Tensor | int) -> torch.Tensor:
    """floor(u * n) for u in [0, 1): a uniform integer in [0, n) (int64; 0 where n is 0).

    numpy's ``randint(n)`` draws the same distribution; the parity tests replay its result k as
    u = (k + 0.5) / n. The clamp only guards float rounding at u close to 1."""
    k = (u * n).long()
    if isinstance(n, int):  # no device tensor from a Python number: that would be a copy
        return k.clamp_(0, n - 1)
    return torch.minimum(k, n - 1).clamp_(min=0)


def flat_cell(y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Index of grid cell (y, x) in a flattened 10x10 grid."""
    return y * 10 + x


# Grids are kept as rows of bits: [..., 10] int64, bit x of row y set when cell (y, x) is. Moving
# a grid sideways is a shift, testing a cell a gather and a shift, and an observation channel is
# one table lookup per row (``Bits.expand``), all far cheaper than [N, 10, 10] byte grids.
FULL_ROW = (1 << 10) - 1


def cell_bits(rows: torch.Tensor, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Bit rows [N, 10] with the one cell (y, x) of each env set; ``rows`` is arange(10)."""
    return (rows == y.unsqueeze(-1)).long() << x.unsqueeze(-1)


def bit_at(grid: torch.Tensor, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Whether cell (y[i], x[i]) of bit-row grid [N, 10] row i is set (bool [N])."""
    return ((grid.gather(1, y.unsqueeze(1)).squeeze(1) >> x) & 1).bool()


_PALETTE = np.array(
    [(228, 26, 28), (55, 126, 184), (77, 175, 74), (152, 78, 163), (255, 127, 0),
     (255, 255, 51), (166, 86, 40), (247, 129, 191), (153, 153, 153), (0, 206, 209)],
    dtype=np.uint8,
)  # fmt: skip
"""One colour per observation channel (ColorBrewer's Set1, then two more)."""


class Bits:
    """Lookup from a 10-bit row to its 10 cells as uint8, on one device."""

    def __init__(self, device: torch.device) -> None:
        codes = torch.arange(1 << 10, device=device)
        self.table = ((codes.unsqueeze(1) >> torch.arange(10, device=device)) & 1).to(torch.uint8)

    def expand(self, rows: torch.Tensor) -> torch.Tensor:
        """Bit rows [N, C, 10] (values below 1024) as observation rows [N, C*100] uint8."""
        n = rows.shape[0]
        return self.table.index_select(0, rows.reshape(-1)).view(n, -1)


class MinAtarEnv(VecEnv):
    """Base of the five MinAtar games as batched torch envs (Young & Tian, "MinAtar: An
    Atari-Inspired Testbed for Thorough and Reproducible Reinforcement Learning Experiments",
    2019; the reference implementation is the ``minatar`` package, 1.0.15).

    Observations: the reference's 10x10xC boolean grid in (C, H, W) order, flattened to uint8
    rows [N, C*100]. Actions: the game's minimal action set (``minimal_actions``, ids into the
    reference's full set n, l, u, r, d, f), as gymnax and PureJaxRL use. Sticky actions as the
    reference's ``Environment``: before each step, with probability ``sticky_action_prob``, an env
    repeats the (full-set) action it took last, and that memory survives episode resets
    (``reset(seed)`` clears it, as a new reference ``Environment`` starts from no-op).

    Subclasses define ``initial_state``, ``dynamics`` and ``observe`` as pure functions of the
    state, the action and ``step_draws`` / ``reset_draws`` columns of uniforms.
    """

    game: str
    """The reference's name of the game (``minatar.Environment(game)``)."""
    channels: tuple[str, ...]
    """The reference's observation channels, in order."""
    minimal_actions: tuple[int, ...]
    """The reference's ``minimal_action_set()``: policy action i is full action
    ``minimal_actions[i]``."""
    step_draws: int
    """Uniforms one step of the dynamics reads (after the sticky-action draw)."""
    reset_draws: int
    """Uniforms one start state reads."""
    slot_fields: frozenset[str] = frozenset()
    """State fields of entity-table slots, meaningless while their slot is empty (its alive mask
    clear), which the dynamics and ``observe`` then never read: a reset leaves them as they are
    and clears the alive masks, a cheaper select than one per field."""
    max_episode_steps: int
    default_max_episode_steps = 1000
    """gymnax's ``max_steps_in_episode`` for the MinAtar games (the reference has no limit)."""
    obs_dtype = torch.uint8

    def __init__(
        self,
        num_envs: int,
        device: torch.device | str = "cpu",
        max_episode_steps: int | None = None,
        *,
        sticky_action_prob: float = STICKY_ACTION_PROB,
        difficulty_ramping: bool = True,
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, got {num_envs}")
        if max_episode_steps is not None and max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be positive or None, got {max_episode_steps}")
        if not 0.0 <= sticky_action_prob <= 1.0:
            raise ValueError(f"sticky_action_prob must be in [0, 1], got {sticky_action_prob}")
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.obs_dim = len(self.channels) * 100
        self.action_space = ActionSpace("discrete", n=len(self.minimal_actions))
        self.max_episode_steps = (
            self.default_max_episode_steps if max_episode_steps is None else max_episode_steps
        )
        self.sticky_action_prob = sticky_action_prob
        self.ramping = difficulty_ramping
        self._full_action = torch.tensor(self.minimal_actions, device=self.device)
        self.generator = torch.Generator(device=self.device)
        self.generator.seed()  # non-deterministic until reset(seed) is called
        self.elapsed = torch.zeros(num_envs, dtype=torch.int32, device=self.device)
        self.last_action = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        self.total_steps = 0
        self._rows = torch.arange(10, device=self.device)
        self._bits = Bits(self.device)
        self._setup()
        self.state = self.initial_state(self._uniforms(self.reset_draws))
        # A start that draws nothing is the same every time: build it and its observation once.
        self._start: tuple[State, torch.Tensor] | None = None
        if self.reset_draws == 0:
            start = self.initial_state(self._uniforms(0))
            self._start = (start, self.observe(start))

    def _setup(self) -> None:  # noqa: B027 (optional hook)
        """Build a game's constant tensors (``self.device`` and ``num_envs`` are set)."""

    @property
    def obs_shape(self) -> tuple[int, ...]:
        return (len(self.channels), 10, 10)

    @property
    def num_draws(self) -> int:
        """Uniform columns one ``step`` consumes: the sticky draw, the dynamics', the reset's."""
        return 1 + self.step_draws + self.reset_draws

    def _uniforms(self, k: int) -> torch.Tensor:
        return torch.rand(
            (self.num_envs, k), generator=self.generator, device=self.device, dtype=torch.float32
        )

    def _zeros(self) -> torch.Tensor:
        return torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)

    def _full(self, value: int) -> torch.Tensor:
        return torch.full((self.num_envs,), value, dtype=torch.int64, device=self.device)

    @abstractmethod
    def initial_state(self, u: torch.Tensor) -> State:
        """Start states of every row from uniforms ``u`` [N, reset_draws]."""

    @abstractmethod
    def dynamics(
        self, s: State, action: torch.Tensor, u: torch.Tensor
    ) -> tuple[State, torch.Tensor, torch.Tensor]:
        """One step of every row, as the reference's ``Env.act``: (next state, reward [N] float32,
        terminal [N] bool). ``action`` holds full-set ids; ``u`` is [N, step_draws]."""

    @abstractmethod
    def observe(self, s: State) -> torch.Tensor:
        """Observation rows [N, C*100] uint8 of ``s`` (the reference's ``state()``, CHW)."""

    def reset(self, seed: int | None = None) -> torch.Tensor:
        if seed is not None:
            self.generator.manual_seed(seed)
        return self.reset_with_uniforms(self._uniforms(self.reset_draws))

    def reset_with_uniforms(self, u: torch.Tensor) -> torch.Tensor:
        """``reset`` with its uniforms [N, reset_draws] given (replaying another RNG's draws)."""
        self.state = self.initial_state(u)
        self.elapsed.zero_()
        self.last_action.zero_()
        return self.observe(self.state)

    def step(
        self, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        return self.step_with_uniforms(actions, self._uniforms(self.num_draws))

    def step_with_uniforms(
        self, actions: torch.Tensor, u: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        """``step`` with its uniforms [N, num_draws] given: column 0 decides the sticky action,
        the next ``step_draws`` feed the dynamics, the last ``reset_draws`` the start state of
        rows whose episode ends."""
        full = self._full_action[actions]
        sticky = u[:, 0] < self.sticky_action_prob
        action = torch.where(sticky, self.last_action, full)
        self.last_action = action
        k = 1 + self.step_draws
        nxt, reward, terminated = self.dynamics(self.state, action, u[:, 1:k])
        self.elapsed += 1
        # Gymnasium's TimeLimit: truncated once elapsed >= limit, even on the terminating step.
        truncated = self.elapsed >= self.max_episode_steps
        done = terminated | truncated
        self.elapsed.masked_fill_(done, 0)
        # Start states for every row, selected where done: no boolean gather (a host sync on GPU).
        if self._start is None:
            fresh = self.initial_state(u[:, k:])
            fresh_obs = self.observe(fresh)
        else:
            fresh, fresh_obs = self._start
        self.state = {
            name: t if name in self.slot_fields else select_rows(done, fresh[name], t)
            for name, t in nxt.items()
        }
        self.total_steps += 1
        final_obs = self.observe(nxt)
        obs = select_rows(done, fresh_obs, final_obs)
        return obs, reward, terminated, truncated, {"final_obs": final_obs}

    def state_dict(self) -> dict[str, Any]:
        return {
            "state": {name: t.clone() for name, t in self.state.items()},
            "last_action": self.last_action.clone(),
            "elapsed": self.elapsed.clone(),
            "total_steps": self.total_steps,
            "max_episode_steps": self.max_episode_steps,
            "rng": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_saved_shape(self, state["elapsed"], (self.num_envs,))
        if set(state["state"]) != set(self.state):
            raise ValueError(
                f"{type(self).__name__} state has fields {sorted(state['state'])}, this env "
                f"expects {sorted(self.state)}; was it saved by another game?"
            )
        self.state = {
            name: t.to(self.device, self.state[name].dtype).clone()
            for name, t in state["state"].items()
        }
        self.last_action = state["last_action"].to(self.device, torch.int64).clone()
        self.elapsed = state["elapsed"].to(self.device, torch.int32).clone()
        self.total_steps = int(state["total_steps"])
        self.max_episode_steps = int(state["max_episode_steps"])
        self.generator.set_state(state["rng"])

    render_fps = 10

    def render_rgb(self) -> np.ndarray:
        """Row 0's grid, each cell in the colour of its last set channel, 16 px a cell."""
        cells = self.observe(self.state)[0].view(len(self.channels), 10, 10).cpu().numpy()
        return draw.grid(cells, _PALETTE[: len(self.channels)], 16)
