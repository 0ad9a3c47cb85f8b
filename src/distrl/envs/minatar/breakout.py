"""MinAtar Breakout, batched (the reference: ``minatar/environments/breakout.py``).

The paddle (bottom row) bounces a ball that moves along diagonals; +1 for each brick of the three
rows at the top that the ball breaks; the rows come back when all are gone and the ball reaches
the bottom row; the episode ends when the ball reaches the bottom row beside the paddle. No
difficulty ramp.
"""

from __future__ import annotations

import torch

from distrl.envs.minatar.base import (
    FULL_ROW,
    LEFT,
    NOOP,
    RIGHT,
    MinAtarEnv,
    State,
    bit_at,
    cell_bits,
    select,
)

# Ball directions 0..3: up-left, up-right, down-right, down-left.
_DX = (-1, 1, 1, -1)
_DY = (-1, -1, 1, 1)
_FLIP_X = (1, 0, 3, 2)  # off a side wall
_FLIP_Y = (3, 2, 1, 0)  # off the ceiling, a brick, or the paddle's old cell
_PADDLE = (2, 3, 0, 1)  # off the paddle's new cell: back the way it came


class Breakout(MinAtarEnv):
    """Channels paddle, ball, trail (the ball's previous cell), brick; actions n, l, r.
    The bricks are a bit-row grid [N, 10] (bit x of row y: a brick at (y, x))."""

    game = "breakout"
    channels = ("paddle", "ball", "trail", "brick")
    minimal_actions = (NOOP, LEFT, RIGHT)
    step_draws = 0
    reset_draws = 1  # which top corner the ball starts from

    def _setup(self) -> None:
        dev = self.device
        self._dx = torch.tensor(_DX, device=dev)
        self._dy = torch.tensor(_DY, device=dev)
        self._flip_x = torch.tensor(_FLIP_X, device=dev)
        self._flip_y = torch.tensor(_FLIP_Y, device=dev)
        self._paddle = torch.tensor(_PADDLE, device=dev)
        self._wall = torch.tensor([0, FULL_ROW, FULL_ROW, FULL_ROW, 0, 0, 0, 0, 0, 0], device=dev)

    def initial_state(self, u: torch.Tensor) -> State:
        right = u[:, 0] >= 0.5  # randint(2): 0 = left corner, 1 = right corner
        ball_x = torch.where(right, 9, 0)
        return {
            "ball_x": ball_x,
            "ball_y": self._full(3),
            "ball_dir": torch.where(right, 3, 2),
            "pos": self._full(4),
            "last_x": ball_x.clone(),
            "last_y": self._full(3),
            "strike": torch.zeros(self.num_envs, dtype=torch.bool, device=self.device),
            "bricks": self._wall.expand(self.num_envs, 10).clone(),
        }

    def dynamics(
        self, s: State, action: torch.Tensor, u: torch.Tensor
    ) -> tuple[State, torch.Tensor, torch.Tensor]:
        pos = (s["pos"] - (action == LEFT).long() + (action == RIGHT).long()).clamp(0, 9)
        last_x, last_y, d = s["ball_x"], s["ball_y"], s["ball_dir"]
        new_x = last_x + self._dx[d]
        new_y = last_y + self._dy[d]
        side = (new_x < 0) | (new_x > 9)
        new_x = new_x.clamp(0, 9)
        d = torch.where(side, self._flip_x[d], d)
        top = new_y < 0
        new_y = new_y.clamp(min=0)
        d = torch.where(top, self._flip_y[d], d)
        bricks = s["bricks"]
        # The ball enters a brick's cell: it breaks the brick and bounces back, unless it broke
        # one on the step before (``strike``), in which case it passes into the cell.
        in_brick = ~top & bit_at(bricks, new_y.clamp(max=9), new_x)
        breaks = in_brick & ~s["strike"]
        bricks = bricks & ~(cell_bits(self._rows, new_y, new_x) * breaks.long().unsqueeze(1))
        new_y = torch.where(breaks, last_y, new_y)
        d = torch.where(breaks, self._flip_y[d], d)
        bottom = ~top & ~in_brick & (new_y == 9)
        # The wall comes back when the ball reaches the bottom row with no brick left.
        empty = bricks.sum(1) == 0
        bricks = select((bottom & empty).unsqueeze(1), self._wall, bricks)
        # The paddle: under the ball's old column (straight bounce) or its new one (reversal).
        old_col = bottom & (last_x == pos)
        new_col = bottom & ~old_col & (new_x == pos)
        d = torch.where(old_col, self._flip_y[d], torch.where(new_col, self._paddle[d], d))
        new_y = torch.where(old_col | new_col, last_y, new_y)
        terminal = bottom & ~old_col & ~new_col
        state = {
            "ball_x": new_x,
            "ball_y": new_y,
            "ball_dir": d,
            "pos": pos,
            "last_x": last_x,
            "last_y": last_y,
            "strike": in_brick,
            "bricks": bricks,
        }
        return state, breaks.float(), terminal

    def observe(self, s: State) -> torch.Tensor:
        rows = self._rows
        grid = torch.stack(
            (
                cell_bits(rows, self._full(9), s["pos"]),
                cell_bits(rows, s["ball_y"], s["ball_x"]),
                cell_bits(rows, s["last_y"], s["last_x"]),
                s["bricks"],
            ),
            1,
        )
        return self._bits.expand(grid)
