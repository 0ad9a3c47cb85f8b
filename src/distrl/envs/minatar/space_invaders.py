"""MinAtar Space Invaders, batched (the reference: ``minatar/environments/space_invaders.py``).

A cannon on the bottom row shoots up at a block of aliens that sweeps sideways and steps down at
the walls; +1 per alien shot; the alien nearest the cannon shoots back every 10 steps; an alien or
an alien's bullet reaching the cannon ends the episode. The block speeds up as it thins out, and
each new wave moves one step faster than the last (difficulty ramp, down to an interval of 6).
"""

from __future__ import annotations

import torch

from distrl.envs.minatar.base import FIRE, LEFT, NOOP, RIGHT, Canvas, MinAtarEnv, State

SHOT_COOL_DOWN = 5
ENEMY_MOVE_INTERVAL = 12
ENEMY_SHOT_INTERVAL = 10


class SpaceInvaders(MinAtarEnv):
    """Channels cannon, alien, alien_left, alien_right (the block's direction), friendly_bullet,
    enemy_bullet; actions n, l, r, f. The aliens and both kinds of bullets are [N, 10, 10] grids,
    as in the reference."""

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
        wave = torch.zeros(1, 10, 10, dtype=torch.bool, device=dev)
        wave[:, 0:4, 2:8] = True
        self._wave = wave
        self._cols = torch.arange(10, device=dev)
        self._rows1 = torch.arange(1, 11, device=dev)

    def initial_state(self, u: torch.Tensor) -> State:
        n, dev = self.num_envs, self.device
        empty = torch.zeros(n, 10, 10, dtype=torch.bool, device=dev)
        return {
            "pos": self._full(5),
            "f_bullets": empty,
            "e_bullets": empty.clone(),
            "aliens": self._wave.expand(n, 10, 10).clone(),
            "alien_dir": self._full(-1),
            "move_interval": self._full(ENEMY_MOVE_INTERVAL),
            "alien_move_timer": self._full(ENEMY_MOVE_INTERVAL),
            "alien_shot_timer": self._full(ENEMY_SHOT_INTERVAL),
            "ramp_index": self._zeros(),
            "shot_timer": self._zeros(),
        }

    def _at(self, grid: torch.Tensor, y: int, x: torch.Tensor) -> torch.Tensor:
        """grid[:, y, x[i]] for each row i (bool [N])."""
        return grid[:, y].gather(1, x.unsqueeze(1)).squeeze(1)

    def dynamics(
        self, s: State, action: torch.Tensor, u: torch.Tensor
    ) -> tuple[State, torch.Tensor, torch.Tensor]:
        pos = s["pos"]
        fire = (action == FIRE) & (s["shot_timer"] == 0)
        shot_timer = torch.where(fire, SHOT_COOL_DOWN, s["shot_timer"])
        cannon = (self._cols == pos.unsqueeze(1)) & fire.unsqueeze(1)
        f_bullets = torch.cat((s["f_bullets"][:, :9], (s["f_bullets"][:, 9] | cannon)[:, None]), 1)
        pos = (pos - (action == LEFT).long() + (action == RIGHT).long()).clamp(0, 9)

        # Friendly bullets rise a row and leave at the top; enemy bullets fall and leave below.
        no_row = torch.zeros_like(f_bullets[:, :1])
        f_bullets = torch.cat((f_bullets[:, 1:], no_row), 1)
        e_bullets = torch.cat((no_row, s["e_bullets"][:, :9]), 1)
        aliens = s["aliens"]
        terminal = self._at(e_bullets, 9, pos) | self._at(aliens, 9, pos)

        # The block moves when its timer runs out: sideways, or down a row (wrapping, as
        # np.roll does) and turning when it touches the wall it heads for.
        move = s["alien_move_timer"] == 0
        count = aliens.sum((1, 2))
        alien_move_timer = torch.where(
            move, torch.minimum(count, s["move_interval"]), s["alien_move_timer"]
        )
        d = s["alien_dir"]
        at_wall = (aliens[:, :, 0].any(1) & (d < 0)) | (aliens[:, :, 9].any(1) & (d > 0))
        down = move & at_wall
        side = move & ~at_wall
        terminal = terminal | (down & aliens[:, 9].any(1))
        shifted = torch.where(
            (d > 0).view(-1, 1, 1), aliens.roll(1, dims=2), aliens.roll(-1, dims=2)
        )
        aliens = torch.where(
            down.view(-1, 1, 1),
            aliens.roll(1, dims=1),
            torch.where(side.view(-1, 1, 1), shifted, aliens),
        )
        d = torch.where(down, -d, d)
        terminal = terminal | (move & self._at(aliens, 9, pos))

        # Every 10 steps the lowest alien of the column nearest the cannon (ties: the left one)
        # shoots; the block is never empty here, it is refilled at the end of each step.
        shoot = s["alien_shot_timer"] == 0
        alien_shot_timer = torch.where(shoot, ENEMY_SHOT_INTERVAL, s["alien_shot_timer"])
        occupied = aliens.any(1)
        key = (self._cols - pos.unsqueeze(1)).abs() * 10 + self._cols
        col = torch.where(occupied, key, 1000).argmin(1)
        in_col = aliens.gather(2, col.view(-1, 1, 1).expand(-1, 10, 1)).squeeze(2)
        row = (in_col * self._rows1).argmax(1)
        shooter = (self._rows1 - 1 == row.unsqueeze(1)).unsqueeze(2) & (
            self._cols == col.unsqueeze(1)
        ).unsqueeze(1)
        e_bullets = e_bullets | (shooter & shoot.view(-1, 1, 1))

        kills = aliens & f_bullets
        reward = kills.sum((1, 2)).float()
        aliens = aliens & ~kills
        f_bullets = f_bullets & ~kills

        # A cleared wave comes back; the next one moves one step sooner (down to 6).
        cleared = ~aliens.any((1, 2))
        ramp = cleared & (s["move_interval"] > 6)
        if not self.ramping:
            ramp = torch.zeros_like(ramp)
        aliens = torch.where(cleared.view(-1, 1, 1), self._wave, aliens)
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
        c = Canvas(self.num_envs, 6, self.device)
        c.cells(0, self._full(9), s["pos"])
        aliens = s["aliens"]
        c.grid(1, aliens)
        left = (s["alien_dir"] < 0).view(-1, 1, 1)
        c.grid(2, aliens & left)
        c.grid(3, aliens & ~left)
        c.grid(4, s["f_bullets"])
        c.grid(5, s["e_bullets"])
        return c.done()
