"""MinAtar Freeway, batched (the reference: ``minatar/environments/freeway.py``).

The chicken (column 4) crosses eight lanes of cars moving at 1..5 steps per cell; +1 for reaching
the top, after which the chicken starts again at the bottom and the cars get new speeds; a car
sends it back to the bottom. The chicken moves at most every 3 steps. The episode ends
(terminated) after 2501 steps: the reference counts 2500 down and ends when the count is below 0.
"""

from __future__ import annotations

import torch

from distrl.envs.minatar.base import (
    DOWN,
    NOOP,
    UP,
    MinAtarEnv,
    State,
    any_rows,
    cell_bits,
    select,
    uniform_int,
)

PLAYER_SPEED = 3
TIME_LIMIT = 2500


class Freeway(MinAtarEnv):
    """Channels chicken, car, speed1..speed5 (a car's trail, on the channel of its speed);
    actions n, u, d. Car i drives on row i + 1: ``car_x`` [N, 8] its column, ``car_speed`` its
    signed speed (sign: direction, magnitude: steps per cell), ``car_timer`` steps until it moves.
    """

    game = "freeway"
    channels = ("chicken", "car", "speed1", "speed2", "speed3", "speed4", "speed5")
    minimal_actions = (NOOP, UP, DOWN)
    # new car speeds: randint(1, 6, 8) then the directions sign(rand(8) - 0.5), 16 uniforms
    step_draws = 16
    reset_draws = 16
    default_max_episode_steps = 10_000
    """Freeway ends itself at step 2501; this limit never cuts an episode at its default."""

    def _setup(self) -> None:
        self._lanes = torch.arange(1, 9, device=self.device)  # car i's row
        self._speeds_1_5 = torch.arange(1, 6, device=self.device).view(1, 5, 1)

    def _speeds(self, u: torch.Tensor) -> torch.Tensor:
        """Signed car speeds [N, 8]: magnitude randint(1, 6), direction -1 below 1/2 and +1
        from it (numpy's sign(rand - 0.5), which gives 0 on exactly 1/2, is never 0 here)."""
        magnitude = uniform_int(u[:, :8], 5) + 1
        return torch.where(u[:, 8:] < 0.5, -magnitude, magnitude)

    def initial_state(self, u: torch.Tensor) -> State:
        speed = self._speeds(u)
        return {
            "pos": self._full(9),
            "move_timer": self._full(PLAYER_SPEED),
            "terminate_timer": self._full(TIME_LIMIT),
            "car_x": torch.zeros(self.num_envs, 8, dtype=torch.int64, device=self.device),
            "car_timer": speed.abs(),
            "car_speed": speed,
        }

    def dynamics(
        self, s: State, action: torch.Tensor, u: torch.Tensor
    ) -> tuple[State, torch.Tensor, torch.Tensor]:
        ready = s["move_timer"] == 0
        up, down = ready & (action == UP), ready & (action == DOWN)
        pos = (s["pos"] - up.long() + down.long()).clamp(0, 9)
        move_timer = torch.where(up | down, PLAYER_SPEED, s["move_timer"])
        # Across: +1, new car speeds (positions kept), back to the bottom.
        win = pos == 0
        new_speed = self._speeds(u)
        speed = select(win.unsqueeze(1), new_speed, s["car_speed"])
        timer = select(win.unsqueeze(1), new_speed.abs(), s["car_timer"])
        pos = torch.where(win, 9, pos)
        # A car in the chicken's cell before or after it moves sends it to the bottom. The
        # reference checks car by car, but once hit the chicken is on row 9 where no car drives,
        # so one test of every car against the chicken's row is the same.
        lane = self._lanes == pos.unsqueeze(1)
        x = s["car_x"]
        hit = any_rows(lane & (x == 4))
        move = timer == 0
        x = (x + move.long() * ((speed > 0).long() * 2 - 1)) % 10
        timer = select(move, speed.abs(), timer - 1)
        hit = hit | any_rows(lane & move & (x == 4))
        pos = torch.where(hit, 9, pos)
        terminate_timer = s["terminate_timer"] - 1
        state = {
            "pos": pos,
            "move_timer": move_timer - (move_timer > 0).long(),
            "terminate_timer": terminate_timer,
            "car_x": x,
            "car_timer": timer,
            "car_speed": speed,
        }
        return state, win.float(), terminate_timer < 0

    def observe(self, s: State) -> torch.Tensor:
        x, speed = s["car_x"], s["car_speed"]
        # one car per row (rows 1..8): its row of bits is 1 << x
        car = 1 << x
        back = (x - ((speed > 0).long() * 2 - 1)) % 10
        # speed k's trail is on channel 1 + k: [N, 5, 8] with the trail in its speed's row
        trails = (speed.abs().unsqueeze(1) == self._speeds_1_5).long() << back.unsqueeze(1)
        cars = torch.nn.functional.pad(torch.cat((car.unsqueeze(1), trails), 1), (1, 1))
        chicken = cell_bits(self._rows, s["pos"], self._full(4)).unsqueeze(1)
        return self._bits.expand(torch.cat((chicken, cars), 1))
