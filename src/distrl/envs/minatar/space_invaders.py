"""MinAtar Space Invaders, batched (the reference: ``minatar/environments/space_invaders.py``).

A cannon on the bottom row shoots up at a block of aliens that sweeps sideways and steps down at
the walls; +1 per alien shot; the alien nearest the cannon shoots back every 10 steps; an alien or
an alien's bullet reaching the cannon ends the episode. The block speeds up as it thins out, and
each new wave moves one step faster than the last (difficulty ramp, down to an interval of 6).
"""

from __future__ import annotations

import functools

import torch

from distrl.envs.minatar.base import (
    FIRE,
    FULL_ROW,
    LEFT,
    NOOP,
    RIGHT,
    MinAtarEnv,
    State,
    cell_bits,
    select,
)

SHOT_COOL_DOWN = 5
ENEMY_MOVE_INTERVAL = 12
ENEMY_SHOT_INTERVAL = 10
_WAVE = (0, 1, 2, 3)  # rows of a new wave, columns 2..7
_WAVE_ROW = sum(1 << x for x in range(2, 8))


@functools.cache
def _nearest_table() -> list[int]:
    """nearest[occupied * 10 + pos]: the reference's ``_nearest_alien`` column, the occupied
    column closest to ``pos`` (ties: the left one) for a 10-bit mask of occupied columns."""
    table = []
    for occupied in range(1 << 10):
        for pos in range(10):
            distance = [abs(x - pos) for x in range(10)]
            cols = sorted(range(10), key=distance.__getitem__)  # stable: ties keep the left
            table.append(next((x for x in cols if occupied >> x & 1), 0))
    return table


class SpaceInvaders(MinAtarEnv):
    """Channels cannon, alien, alien_left, alien_right (the block's direction), friendly_bullet,
    enemy_bullet; actions n, l, r, f. The aliens and both kinds of bullets are bit-row grids
    [N, 10] (bit x of row y: something at (y, x))."""

    game = "space_invaders"
    channels = (
        "cannon",
        "alien",
        "alien_left",
        "alien_right",
        "friendly_bullet",
        "enemy_bullet",
    )
    minimal_actions = (NOOP, LEFT, RIGHT, FIRE)
    step_draws = 0
    reset_draws = 0

    def _setup(self) -> None:
        dev = self.device
        self._wave = torch.tensor([_WAVE_ROW if y in _WAVE else 0 for y in range(10)], device=dev)
        self._nearest = torch.tensor(_nearest_table(), device=dev)
        self._popcount = torch.tensor([bin(v).count("1") for v in range(1 << 10)], device=dev)
        self._rows1 = torch.arange(1, 11, device=dev)

    def initial_state(self, u: torch.Tensor) -> State:
        n, dev = self.num_envs, self.device
        return {
            "pos": self._full(5),
            "f_bullets": torch.zeros(n, 10, dtype=torch.int64, device=dev),
            "e_bullets": torch.zeros(n, 10, dtype=torch.int64, device=dev),
            "aliens": self._wave.expand(n, 10).clone(),
            "alien_dir": self._full(-1),
            "move_interval": self._full(ENEMY_MOVE_INTERVAL),
            "alien_move_timer": self._full(ENEMY_MOVE_INTERVAL),
            "alien_shot_timer": self._full(ENEMY_SHOT_INTERVAL),
            "ramp_index": self._zeros(),
            "shot_timer": self._zeros(),
        }

    @staticmethod
    def _columns(grid: torch.Tensor) -> torch.Tensor:
        """10-bit mask of the occupied columns of bit-row grids [N, 10]."""
        occupied = grid[:, 0]
        for y in range(1, 10):
            occupied = occupied | grid[:, y]
        return occupied

    def dynamics(
        self, s: State, action: torch.Tensor, u: torch.Tensor
    ) -> tuple[State, torch.Tensor, torch.Tensor]:
        pos = s["pos"]
        fire = (action == FIRE) & (s["shot_timer"] == 0)
        shot_timer = torch.where(fire, SHOT_COOL_DOWN, s["shot_timer"])
        # Friendly bullets (the new one from row 9) rise a row and leave at the top; enemy
        # bullets fall a row and leave at the bottom.
        f_bullets, e_bullets, no_row = s["f_bullets"], s["e_bullets"], self._zeros().unsqueeze(1)
        new = (f_bullets[:, 9] | (fire.long() << pos)).unsqueeze(1)
        f_bullets = torch.cat((f_bullets[:, 1:9], new, no_row), 1)
        e_bullets = torch.cat((no_row, e_bullets[:, :9]), 1)
        pos = (pos - (action == LEFT).long() + (action == RIGHT).long()).clamp(0, 9)
        aliens = s["aliens"]
        terminal = (((e_bullets[:, 9] | aliens[:, 9]) >> pos) & 1).bool()

        # The block moves when its timer runs out: sideways, or down a row (wrapping, as
        # np.roll does) and turning when it touches the wall it heads for.
        move = s["alien_move_timer"] == 0
        count = torch.take(self._popcount, aliens).sum(1)
        alien_move_timer = torch.where(
            move, torch.minimum(count, s["move_interval"]), s["alien_move_timer"]
        )
        d = s["alien_dir"]
        occupied = self._columns(aliens)
        at_wall = ((occupied & 1).bool() & (d < 0)) | ((occupied >> 9).bool() & (d > 0))
        down = move & at_wall
        side = move & ~at_wall
        terminal = terminal | (down & (aliens[:, 9] != 0))
        rolled = torch.cat((aliens[:, 9:], aliens[:, :9]), 1)
        sideways = select(
            (d > 0).unsqueeze(1),
            ((aliens << 1) | (aliens >> 9)) & FULL_ROW,
            ((aliens >> 1) | (aliens << 9)) & FULL_ROW,
        )
        aliens = select(down.unsqueeze(1), rolled, select(side.unsqueeze(1), sideways, aliens))
        d = torch.where(down, -d, d)
        terminal = terminal | (move & ((aliens[:, 9] >> pos) & 1).bool())

        # Every 10 steps the lowest alien of the column nearest the cannon (ties: the left one)
        # shoots; the block is never empty here, it is refilled at the end of each step.
        shoot = s["alien_shot_timer"] == 0
        alien_shot_timer = torch.where(shoot, ENEMY_SHOT_INTERVAL, s["alien_shot_timer"])
        col = self._nearest[self._columns(aliens) * 10 + pos]
        row = (((aliens >> col.unsqueeze(1)) & 1) * self._rows1).argmax(1)
        e_bullets = e_bullets | (cell_bits(self._rows, row, col) * shoot.long().unsqueeze(1))

        kills = aliens & f_bullets
        reward = torch.take(self._popcount, kills).sum(1).float()
        aliens = aliens & ~kills
        f_bullets = f_bullets & ~kills

        # A cleared wave comes back; the next one moves one step sooner (down to 6).
        cleared = aliens.sum(1) == 0
        ramp = cleared & (s["move_interval"] > 6)
        if not self.ramping:
            ramp = torch.zeros_like(ramp)
        aliens = select(cleared.unsqueeze(1), self._wave, aliens)
        state = {
            "pos": pos,
            "f_bullets": f_bullets,
            "e_bullets": e_bullets,
            "aliens": aliens,
            "alien_dir": d,
            "move_interval": s["move_interval"] - ramp.long(),
            "alien_move_timer": alien_move_timer - 1,
            "alien_shot_timer": alien_shot_timer - 1,
            "ramp_index": s["ramp_index"] + ramp.long(),
            "shot_timer": shot_timer - (shot_timer > 0).long(),
        }
        return state, reward, terminal

    def observe(self, s: State) -> torch.Tensor:
        aliens = s["aliens"]
        left = (s["alien_dir"] < 0).long().unsqueeze(1)
        grid = torch.stack(
            (
                cell_bits(self._rows, self._full(9), s["pos"]),
                aliens,
                aliens * left,
                aliens * (1 - left),
                s["f_bullets"],
                s["e_bullets"],
            ),
            1,
        )
        return self._bits.expand(grid)
