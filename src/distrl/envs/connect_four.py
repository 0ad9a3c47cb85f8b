"""Connect Four as a batched torch env on the policy's device, played by the learner against
opponents: a uniformly random player, or frozen past versions of the learner itself (a league,
``envs/league.py``), the self-play of the ``connect-four`` task.

The board is 6 rows by 7 columns; a move drops a piece into a column that is not full; four in
a row (across, down or diagonal) wins, a full board is a draw. Each env is one game: the learner
plays one colour (first or second, drawn at each game's start), and the opponent's replies
happen inside ``step``, so the learner sees a single-agent env whose step is its own move and
the opponent's answer.

- **Observation** [91] float32, from the learner's side: its pieces (42, row-major from the
  top), the opponent's (42), then the legal-action mask (7: 1 where the column has room).
  ``ActionSpace.mask_in_obs`` tells the policy that the last 7 entries are the mask: an illegal
  column gets no probability (``policy/actor_critic.py``).
- **Reward** +1 for a win, -1 for a loss (an illegal move loses too, for a policy that ignores
  the mask), 0 for a draw or a move that ends nothing; ``terminated`` when the game ends.
  ``info["outcome"]`` is the game's result from the learner's side where it ended (1 win,
  0.5 draw, 0 loss), which the league's ratings and the metrics read.

The game's rules are checked move for move against PettingZoo's ``connect_four_v3``
(``tests/envs/test_connect_four.py``).
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from distrl.envs.core import ActionSpace, VecEnv, check_saved_shape

ROWS, COLS = 6, 7
OBS_DIM = 2 * ROWS * COLS + COLS
MOVES = ROWS * COLS // 2 + 1
"""The most moves the learner makes in one game (21, or 22 counting the one that fills the
board when the opponent started: the time limit never cuts a game)."""


def four_in_a_row(pieces: torch.Tensor) -> torch.Tensor:
    """[N] bool: whether the bool boards [N, ROWS, COLS] hold four in a line."""
    p = pieces
    across = p[:, :, :-3] & p[:, :, 1:-2] & p[:, :, 2:-1] & p[:, :, 3:]
    down = p[:, :-3] & p[:, 1:-2] & p[:, 2:-1] & p[:, 3:]
    diag = p[:, :-3, :-3] & p[:, 1:-2, 1:-2] & p[:, 2:-1, 2:-1] & p[:, 3:, 3:]
    anti = p[:, 3:, :-3] & p[:, 2:-1, 1:-2] & p[:, 1:-2, 2:-1] & p[:, :-3, 3:]
    return torch.cat([x.flatten(1) for x in (across, down, diag, anti)], 1).any(1)


def drop(board: torch.Tensor, heights: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor,
         colour: torch.Tensor) -> None:  # fmt: skip
    """Drop ``colour`` [M] pieces into columns ``cols`` [M] of boards ``rows`` [M] (in place;
    the columns must have room)."""
    level = ROWS - 1 - heights[rows, cols]
    board[rows, level, cols] = colour
    heights[rows, cols] += 1


def observe(board: torch.Tensor, heights: torch.Tensor, colour: torch.Tensor) -> torch.Tensor:
    """[N, OBS_DIM] float32 of boards [N, ROWS, COLS] from the side of ``colour`` [N]."""
    c = colour.view(-1, 1, 1)
    mine = (board == c).flatten(1)
    theirs = (board == -c).flatten(1)
    return torch.cat([mine, theirs, heights < ROWS], 1).float()


def random_moves(mask: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """A uniformly random legal column [M] for each legal-move mask [M, COLS]."""
    u = torch.rand(mask.shape, generator=generator, device=mask.device)
    return torch.where(mask, u, -1.0).argmax(1)


def one_step_lookahead(obs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """A scripted player [M] for observations [M, OBS_DIM]: win now if it can, else block a
    column where the opponent would win next, else a random legal column, preferring the
    centre (the usual baseline above random)."""
    n = obs.shape[0]
    mine = obs[:, : ROWS * COLS].view(n, ROWS, COLS).bool()
    theirs = obs[:, ROWS * COLS : 2 * ROWS * COLS].view(n, ROWS, COLS).bool()
    mask = obs[:, -COLS:].bool()
    heights = (mine | theirs).sum(1)
    score = torch.rand(mask.shape, generator=generator, device=obs.device)
    score = score + 0.5 * (torch.arange(COLS, device=obs.device) == COLS // 2)
    for who, bonus in ((theirs, 10.0), (mine, 100.0)):  # blocking, then winning, ranks higher
        for c in range(COLS):
            room = heights[:, c] < ROWS
            trial = who.clone()
            rows = torch.nonzero(room).squeeze(1)
            trial[rows, ROWS - 1 - heights[rows, c], c] = True
            score[:, c] += bonus * (four_in_a_row(trial) & room)
    return torch.where(mask, score, -1e9).argmax(1)


class Opponents(Protocol):
    """Who answers the learner: ``envs/league.League``."""

    def sample(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """The opponent of each of ``n`` new games [n] (int64; -1: the random player)."""
        ...

    def act(self, obs: torch.Tensor, who: torch.Tensor, generator: torch.Generator
            ) -> torch.Tensor:  # fmt: skip
        """Moves [M] of opponents ``who`` [M] for their observations [M, OBS_DIM]."""
        ...

    def record(self, who: torch.Tensor, outcome: torch.Tensor) -> None:
        """Games against ``who`` [M] ended with ``outcome`` [M] (the learner's side)."""
        ...


class ConnectFour(VecEnv):
    """``num_envs`` games of Connect Four against ``opponents`` (None: the random player)."""

    def __init__(self, num_envs: int, device: torch.device | str,
                 max_episode_steps: int | None = None) -> None:  # fmt: skip
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.obs_dim = OBS_DIM
        self.action_space = ActionSpace("discrete", n=COLS, mask_in_obs=True)
        self.limit: int = max_episode_steps or MOVES
        self.max_episode_steps = self.limit
        self.opponents: Opponents | None = None
        self.generator = torch.Generator(device=self.device)
        self.generator.seed()
        self.board = torch.zeros(num_envs, ROWS, COLS, dtype=torch.int8, device=self.device)
        self.heights = torch.zeros(num_envs, COLS, dtype=torch.int64, device=self.device)
        self.seat = torch.ones(num_envs, dtype=torch.int8, device=self.device)
        self.who = torch.full((num_envs,), -1, dtype=torch.int64, device=self.device)
        self.elapsed = torch.zeros(num_envs, dtype=torch.int32, device=self.device)

    # ---- the opponents' side
    def _opponent_moves(self, rows: torch.Tensor) -> torch.Tensor:
        """The opponents of games ``rows`` [M] move; returns [M] whether that won."""
        if rows.numel() == 0:
            return torch.zeros(0, dtype=torch.bool, device=self.device)
        colour = -self.seat[rows]
        obs = observe(self.board[rows], self.heights[rows], colour)
        who = self.who[rows]
        moves = random_moves(obs[:, -COLS:].bool(), self.generator)
        if self.opponents is not None and bool((who >= 0).any()):
            league = torch.nonzero(who >= 0).squeeze(1)
            moves[league] = self.opponents.act(obs[league], who[league], self.generator)
        drop(self.board, self.heights, rows, moves, colour)
        return four_in_a_row(self.board[rows] == colour.view(-1, 1, 1))

    def _new_games(self, rows: torch.Tensor) -> None:
        """Games ``rows`` start again: an empty board, a colour and an opponent drawn; where the
        learner plays second, the opponent's first move."""
        if rows.numel() == 0:
            return
        self.board[rows] = 0
        self.heights[rows] = 0
        self.elapsed[rows] = 0
        first = torch.rand(rows.numel(), generator=self.generator, device=self.device) < 0.5
        self.seat[rows] = torch.where(first, 1, -1).to(torch.int8)
        if self.opponents is not None:
            self.who[rows] = self.opponents.sample(rows.numel(), self.generator)
        else:
            self.who[rows] = -1
        self._opponent_moves(rows[~first])

    # ---- VecEnv
    def reset(self, seed: int | None = None) -> torch.Tensor:
        if seed is not None:
            self.generator.manual_seed(seed)
        self._new_games(torch.arange(self.num_envs, device=self.device))
        return observe(self.board, self.heights, self.seat)

    def step(
        self, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        n = self.num_envs
        a = actions.to(self.device, torch.int64).view(n)
        all_rows = torch.arange(n, device=self.device)
        legal = self.heights.gather(1, a.unsqueeze(1)).squeeze(1) < ROWS
        played = all_rows[legal]
        drop(self.board, self.heights, played, a[legal], self.seat[legal])
        won = four_in_a_row(self.board == self.seat.view(-1, 1, 1)) & legal
        full = (self.heights == ROWS).all(1)
        over = won | full | ~legal
        answer = all_rows[~over]
        lost = ~legal
        lost[answer] = self._opponent_moves(answer)
        full = (self.heights == ROWS).all(1)
        terminated = won | lost | full
        self.elapsed += 1
        truncated = (self.elapsed >= self.limit) & ~terminated
        reward = won.float() - lost.float()
        outcome = torch.where(won, 1.0, torch.where(lost, 0.0, 0.5))
        final_obs = observe(self.board, self.heights, self.seat)
        ended = all_rows[terminated]
        if self.opponents is not None and ended.numel():
            self.opponents.record(self.who[ended], outcome[ended])
        self._new_games(all_rows[terminated | truncated])
        obs = observe(self.board, self.heights, self.seat)
        info = {"final_obs": final_obs, "outcome": torch.where(terminated, outcome, -1.0)}
        return obs, reward, terminated, truncated, info

    def state_dict(self) -> dict[str, Any]:
        state = {
            "board": self.board.clone(),
            "heights": self.heights.clone(),
            "seat": self.seat.clone(),
            "who": self.who.clone(),
            "elapsed": self.elapsed.clone(),
            "rng": self.generator.get_state(),
        }
        if self.opponents is not None and hasattr(self.opponents, "state_dict"):
            state["league"] = self.opponents.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_saved_shape(self, state["board"], (self.num_envs, ROWS, COLS))
        self.board = state["board"].to(self.device, torch.int8).clone()
        self.heights = state["heights"].to(self.device, torch.int64).clone()
        self.seat = state["seat"].to(self.device, torch.int8).clone()
        self.who = state["who"].to(self.device, torch.int64).clone()
        self.elapsed = state["elapsed"].to(self.device, torch.int32).clone()
        self.generator.set_state(state["rng"])
        if "league" in state and self.opponents is not None:
            self.opponents.load_state_dict(state["league"])  # type: ignore[attr-defined]
