"""MinAtar Asterix, batched (the reference: ``minatar/environments/asterix.py``).

The player moves in four directions; enemies and gold enter from the sides along rows 1..8 (one
slot per row); +1 for each gold picked up; touching an enemy ends the episode. Every 100 steps the
spawn interval shrinks by one and, every other time, the move interval too (difficulty ramp).
"""

from __future__ import annotations

import torch

from distrl.envs.minatar.base import (
    DOWN,
    LEFT,
    NOOP,
    RIGHT,
    UP,
    MinAtarEnv,
    State,
    any_rows,
    cell_bits,
    select,
    uniform_int,
)

RAMP_INTERVAL = 100
INIT_SPAWN_SPEED = 10
INIT_MOVE_INTERVAL = 5


class Asterix(MinAtarEnv):
    """Channels player, enemy, trail, gold; actions n, l, u, r, d.

    Entities live in 8 slots, slot i on row i + 1 (as in the reference): ``ent_x`` [N, 8] the
    column, ``ent_right`` the direction, ``ent_gold`` gold or enemy, ``ent_alive`` occupancy.
    """

    game = "asterix"
    channels = ("player", "enemy", "trail", "gold")
    minimal_actions = (NOOP, LEFT, UP, RIGHT, DOWN)
    # a spawn's direction (rand() < 1/2), gold (rand() < 1/3) and free slot (randint(#free))
    step_draws = 3
    reset_draws = 0
    slot_fields = frozenset(("ent_x", "ent_right", "ent_gold"))

    def _setup(self) -> None:
        self._lanes = torch.arange(1, 9, device=self.device)  # slot i's row

    def initial_state(self, u: torch.Tensor) -> State:
        n, dev = self.num_envs, self.device
        no = torch.zeros(n, 8, dtype=torch.bool, device=dev)
        return {
            "player_x": self._full(5),
            "player_y": self._full(5),
            "ent_x": torch.zeros(n, 8, dtype=torch.int64, device=dev),
            "ent_right": no,
            "ent_gold": no.clone(),
            "ent_alive": no.clone(),
            "spawn_speed": self._full(INIT_SPAWN_SPEED),
            "spawn_timer": self._full(INIT_SPAWN_SPEED),
            "move_speed": self._full(INIT_MOVE_INTERVAL),
            "move_timer": self._full(INIT_MOVE_INTERVAL),
            "ramp_timer": self._full(RAMP_INTERVAL),
            "ramp_index": self._zeros(),
        }

    def dynamics(
        self, s: State, action: torch.Tensor, u: torch.Tensor
    ) -> tuple[State, torch.Tensor, torch.Tensor]:
        x, right, gold, alive = s["ent_x"], s["ent_right"], s["ent_gold"], s["ent_alive"]
        # Spawn into a uniformly chosen free slot (none free: nothing, the draws are still made).
        spawn = s["spawn_timer"] == 0
        lr, is_gold = u[:, 0] < 0.5, u[:, 1] < 1 / 3
        free = ~alive
        k = uniform_int(u[:, 2], free.sum(1))
        place = free & (free.cumsum(1) == (k + 1).unsqueeze(1)) & spawn.unsqueeze(1)
        x = select(place, torch.where(lr, 0, 9).unsqueeze(1), x)
        right = select(place, lr.unsqueeze(1), right)
        gold = select(place, is_gold.unsqueeze(1), gold)
        alive = alive | place
        spawn_timer = torch.where(spawn, s["spawn_speed"], s["spawn_timer"])

        px = (s["player_x"] - (action == LEFT).long() + (action == RIGHT).long()).clamp(0, 9)
        py = (s["player_y"] - (action == UP).long() + (action == DOWN).long()).clamp(1, 8)
        on_row = (self._lanes == py.unsqueeze(1)) & alive

        # Contact before the entities move, then again after those that move this step.
        hit = on_row & (x == px.unsqueeze(1))
        picked = hit & gold
        terminal = any_rows(hit & ~gold)
        alive = alive & ~picked
        move = s["move_timer"] == 0
        move_timer = torch.where(move, s["move_speed"], s["move_timer"])
        moving = alive & move.unsqueeze(1)
        x = x + moving.long() * (right.long() * 2 - 1)
        alive = alive & ~(moving & ((x < 0) | (x > 9)))
        hit = moving & alive & (self._lanes == py.unsqueeze(1)) & (x == px.unsqueeze(1))
        picked2 = hit & gold
        terminal = terminal | any_rows(hit & ~gold)
        alive = alive & ~picked2
        reward = (picked.sum(1) + picked2.sum(1)).float()

        # Timers, then the difficulty ramp: every RAMP_INTERVAL + 1 steps while anything is left
        # to speed up, the spawn interval shrinks and, every other time, the move interval.
        spawn_speed, move_speed, ramp_index = s["spawn_speed"], s["move_speed"], s["ramp_index"]
        ramp_on = (spawn_speed > 1) | (move_speed > 1)
        if not self.ramping:
            ramp_on = torch.zeros_like(ramp_on)
        tick = ramp_on & (s["ramp_timer"] >= 0)
        bump = ramp_on & ~tick
        state = {
            "player_x": px,
            "player_y": py,
            "ent_x": x,
            "ent_right": right,
            "ent_gold": gold,
            "ent_alive": alive,
            "spawn_speed": spawn_speed - (bump & (spawn_speed > 1)).long(),
            "spawn_timer": spawn_timer - 1,
            "move_speed": move_speed - (bump & (move_speed > 1) & (ramp_index % 2 == 1)).long(),
            "move_timer": move_timer - 1,
            "ramp_timer": torch.where(
                tick, s["ramp_timer"] - 1, torch.where(bump, RAMP_INTERVAL, s["ramp_timer"])
            ),
            "ramp_index": ramp_index + bump.long(),
        }
        return state, reward, terminal

    def observe(self, s: State) -> torch.Tensor:
        x, right, gold, alive = s["ent_x"], s["ent_right"], s["ent_gold"], s["ent_alive"]
        # one entity per row: its row of bits is 1 << x on rows 1..8
        cell = alive.long() << x.clamp(0, 9)
        back = x - (right.long() * 2 - 1)
        trail = (alive & (back >= 0) & (back <= 9)).long() << back.clamp(0, 9)
        ents = torch.stack((cell * ~gold, trail, cell * gold), 1)  # enemy, trail, gold
        ents = torch.nn.functional.pad(ents, (1, 1))  # rows 0 and 9 are empty
        player = cell_bits(self._rows, s["player_y"], s["player_x"]).unsqueeze(1)
        return self._bits.expand(torch.cat((player, ents), 1))
