"""MinAtar Seaquest, batched (the reference: ``minatar/environments/seaquest.py``).

The player's submarine (two cells: front and back) shoots fish and enemy submarines that cross
rows 1..8 (+1 each), picks up divers (up to 6), and must come up for air: oxygen runs out in 200
steps below the surface; surfacing with divers refills it and costs one diver, surfacing with six
pays one point per 20 oxygen left and empties the boat; surfacing with none ends the episode, as
does touching a fish, a submarine or an enemy bullet, or running out of oxygen. Each surfacing
raises the difficulty (faster spawns, then faster enemies).

The reference keeps its entities in Python lists and resolves collisions walking them in order,
so which enemy a bullet removes depends on list order. Here the lists are tables with a spawn
number per enemy (list order = ascending spawn number), and the few order-dependent decisions are
taken by masked min/max over those numbers:
  - a friendly bullet moving into a cell removes the oldest fish there, else the oldest sub
    (the reference walks its bullets newest first; at most two are alive, so that loop is kept);
  - an enemy moving into a bullet's cell is removed with the oldest bullet there, subs before fish
    and the newest first (the reference's two loops); bullet by bullet (oldest first), taking the
    first unclaimed enemy in that order, pairs the same enemies with the same bullets;
  - divers are collected newest first while the boat has room (at most two are alive).
Enemy bullets do not interact with each other, so they are two grids (by direction).

Capacities: friendly bullets 2 (one every 5 steps, gone within 9), divers 2 (one every 30 steps,
gone within 59), enemies ``ENEMY_SLOTS``; a spawn with no free slot would be dropped, which needs
more enemies alive than the spawn rate and their speed allow (about 30 at the hardest level).

Quirks of the reference kept on purpose: surfacing with six divers leaves the count at -1 (it is
set to 0 and then decremented), after which surfacing never ends the episode and the gauge shows
no diver; a sub that is shot or leaves the screen still fires if its shot timer is due (from
outside the screen the bullet leaves at once).
"""

from __future__ import annotations

import torch

from distrl.envs.minatar.base import (
    DOWN,
    FIRE,
    LEFT,
    NOOP,
    RIGHT,
    UP,
    MinAtarEnv,
    State,
    any_rows,
    cell_bits,
    flat_cell,
    select,
    uniform_int,
)

MAX_OXYGEN = 200
INIT_SPAWN_SPEED = 20
DIVER_SPAWN_SPEED = 30
INIT_MOVE_INTERVAL = 5
SHOT_COOL_DOWN = 5
ENEMY_SHOT_INTERVAL = 10
DIVER_MOVE_INTERVAL = 5
ENEMY_SLOTS = 32
_SUB_FIRST = 1 << 40  # added to a sub's spawn number to order it before every fish
_SMALL = torch.int16  # the enemy tables' positions and timers: a quarter of int64's bytes


def _put(
    table: torch.Tensor, slot: torch.Tensor, ok: torch.Tensor, value: torch.Tensor | int
) -> torch.Tensor:
    """A copy of ``table`` [N, K] with entry ``slot`` [N, 1] of row i set to ``value`` [N] (or a
    number) where ``ok`` [N]: one gather and one scatter instead of a select of the table."""
    old = table.gather(1, slot)
    if isinstance(value, torch.Tensor):
        value = value.to(table.dtype).unsqueeze(1)
    return table.clone().scatter_(1, slot, torch.where(ok.unsqueeze(1), value, old))


class Seaquest(MinAtarEnv):
    """Channels sub_front, sub_back, friendly_bullet, trail, enemy_bullet, enemy_fish,
    enemy_sub, oxygen_guage, diver_guage, diver (the reference's names); all six actions."""

    game = "seaquest"
    channels = (
        "sub_front",
        "sub_back",
        "friendly_bullet",
        "trail",
        "enemy_bullet",
        "enemy_fish",
        "enemy_sub",
        "oxygen_guage",
        "diver_guage",
        "diver",
    )
    minimal_actions = (NOOP, LEFT, UP, RIGHT, DOWN, FIRE)
    # enemy: direction rand() < 1/2, sub rand() < 1/3, row randint(1, 9);
    # diver: direction rand() < 1/2, row randint(1, 9)
    step_draws = 5
    reset_draws = 0
    slot_fields = frozenset(
        f"{table}_{field}"
        for table, fields in (
            ("fb", ("x", "y", "right")),
            ("dv", ("x", "y", "right", "timer")),
            ("en", ("x", "y", "timer", "shot", "id", "right", "sub")),
        )
        for field in fields
    )

    def _setup(self) -> None:
        dev = self.device
        self._cols = torch.arange(10, device=dev)
        self._two = torch.arange(2, device=dev)
        self._shot_interval = torch.tensor(ENEMY_SHOT_INTERVAL, dtype=_SMALL, device=dev)
        self._diver_interval = torch.tensor(DIVER_MOVE_INTERVAL, device=dev)
        self._sink100 = torch.tensor(100, dtype=_SMALL, device=dev)

    def initial_state(self, u: torch.Tensor) -> State:
        n, dev = self.num_envs, self.device

        def table(k: int, dtype: torch.dtype) -> torch.Tensor:
            return torch.zeros(n, k, dtype=dtype, device=dev)

        no_bullets = torch.zeros(n, 10, 10, dtype=torch.bool, device=dev)
        return {
            "sub_x": self._full(5),
            "sub_y": self._zeros(),
            "sub_right": torch.zeros(n, dtype=torch.bool, device=dev),
            "oxygen": self._full(MAX_OXYGEN),
            "diver_count": self._zeros(),
            "e_spawn_speed": self._full(INIT_SPAWN_SPEED),
            "e_spawn_timer": self._full(INIT_SPAWN_SPEED),
            "d_spawn_timer": self._full(DIVER_SPAWN_SPEED),
            "move_speed": self._full(INIT_MOVE_INTERVAL),
            "ramp_index": self._zeros(),
            "shot_timer": self._zeros(),
            "surface": torch.ones(n, dtype=torch.bool, device=dev),
            "next_id": self._zeros(),
            # friendly bullets and divers: slot 0 is the older (compacted after each step)
            "fb_x": table(2, torch.int64),
            "fb_y": table(2, torch.int64),
            "fb_right": table(2, torch.bool),
            "fb_alive": table(2, torch.bool),
            "dv_x": table(2, torch.int64),
            "dv_y": table(2, torch.int64),
            "dv_timer": table(2, torch.int64),
            "dv_right": table(2, torch.bool),
            "dv_alive": table(2, torch.bool),
            # fish and enemy subs, in any slot; ``en_id`` is the spawn number (list order)
            "en_x": table(ENEMY_SLOTS, _SMALL),
            "en_y": table(ENEMY_SLOTS, _SMALL),
            "en_timer": table(ENEMY_SLOTS, _SMALL),
            "en_shot": table(ENEMY_SLOTS, _SMALL),
            "en_id": table(ENEMY_SLOTS, torch.int64),
            "en_right": table(ENEMY_SLOTS, torch.bool),
            "en_sub": table(ENEMY_SLOTS, torch.bool),
            "en_alive": table(ENEMY_SLOTS, torch.bool),
            "eb_left": no_bullets,
            "eb_right": no_bullets.clone(),
        }

    def dynamics(
        self, s: State, action: torch.Tensor, u: torch.Tensor
    ) -> tuple[State, torch.Tensor, torch.Tensor]:
        n = self.num_envs
        col = lambda t: t.unsqueeze(1)  # noqa: E731 ([N] -> [N, 1])
        move_speed = s["move_speed"]

        # Enemy spawn: direction, kind, row; not into a row where something heads the other way.
        ex, ey, er, esub = s["en_x"], s["en_y"], s["en_right"], s["en_sub"]
        etimer, eshot, eid, ealive = s["en_timer"], s["en_shot"], s["en_id"], s["en_alive"]
        speed16 = col(move_speed.to(_SMALL))  # the tables' dtype
        spawn = s["e_spawn_timer"] == 0
        lr, is_sub, row = u[:, 0] < 0.5, u[:, 1] < 1 / 3, uniform_int(u[:, 2], 8) + 1
        blocked = any_rows(ealive & (ey == col(row.to(_SMALL))) & (er != col(lr)))
        free = ~ealive
        slot = free.to(torch.uint8).argmax(1, keepdim=True)  # the first free slot
        ok = spawn & ~blocked & any_rows(free)
        ex = _put(ex, slot, ok, torch.where(lr, 0, 9))
        ey = _put(ey, slot, ok, row)
        er = _put(er, slot, ok, lr)
        esub = _put(esub, slot, ok, is_sub)
        etimer = _put(etimer, slot, ok, move_speed)
        eshot = _put(eshot, slot, ok, ENEMY_SHOT_INTERVAL)
        eid = _put(eid, slot, ok, s["next_id"])
        ealive = _put(ealive, slot, ok, True)
        next_id = s["next_id"] + ok.long()
        e_spawn_timer = torch.where(spawn, s["e_spawn_speed"], s["e_spawn_timer"])

        # Diver spawn, appended after the divers alive.
        d_spawn = s["d_spawn_timer"] == 0
        d_lr, d_row = u[:, 3] < 0.5, uniform_int(u[:, 4], 8) + 1
        d_place = (self._two == col(s["dv_alive"].sum(1))) & col(d_spawn)
        dvx = select(d_place, col(torch.where(d_lr, 0, 9)), s["dv_x"])
        dvy = select(d_place, col(d_row), s["dv_y"])
        dvr = select(d_place, col(d_lr), s["dv_right"])
        dvt = select(d_place, self._diver_interval, s["dv_timer"])
        dva = s["dv_alive"] | d_place
        d_spawn_timer = torch.where(d_spawn, DIVER_SPAWN_SPEED, s["d_spawn_timer"])

        # The player: fire (appended after the bullets alive) or move; fire while reloading
        # does nothing.
        sx, sy, s_right = s["sub_x"], s["sub_y"], s["sub_right"]
        fire = (action == FIRE) & (s["shot_timer"] == 0)
        f_place = (self._two == col(s["fb_alive"].sum(1))) & col(fire)
        fbx = select(f_place, col(sx), s["fb_x"])
        fby = select(f_place, col(sy), s["fb_y"])
        fbr = select(f_place, col(s_right), s["fb_right"])
        fba = s["fb_alive"] | f_place
        shot_timer = torch.where(fire, SHOT_COOL_DOWN, s["shot_timer"])
        left, right = action == LEFT, action == RIGHT
        sx = (sx - left.long() + right.long()).clamp(0, 9)
        s_right = torch.where(left, False, torch.where(right, True, s_right))
        sy = (sy - (action == UP).long() + (action == DOWN).long()).clamp(0, 8)

        # Friendly bullets, newest first: move, leave the screen, or remove the oldest fish in
        # their new cell (else the oldest sub) and vanish.
        bx, ba = list(fbx.unbind(1)), list(fba.unbind(1))
        by, br = fby.unbind(1), fbr.unbind(1)
        reward = torch.zeros(n, dtype=torch.int64, device=self.device)
        order = eid + esub.long() * _SUB_FIRST  # list order: fish, then subs
        for j in (1, 0):
            bx[j] = bx[j] + ba[j].long() * (br[j].long() * 2 - 1)
            ba[j] = ba[j] & (bx[j] >= 0) & (bx[j] <= 9)
            there = ealive & (ex == col(bx[j].to(_SMALL))) & (ey == col(by[j].to(_SMALL)))
            there = there & col(ba[j])
            first = (order + (~there).long() * (_SUB_FIRST * 4)).min(1).values
            hit = any_rows(there)
            ealive = ealive & ~(there & (order == col(first)))
            ba[j] = ba[j] & ~hit
            reward += hit.long()

        # Divers, newest first: collected in the player's cell while the boat has room, else
        # they move every 6 steps and may then be collected or leave the screen.
        count = s["diver_count"]
        dx, dy, dr = list(dvx.unbind(1)), dvy.unbind(1), dvr.unbind(1)
        dt, da = list(dvt.unbind(1)), list(dva.unbind(1))
        for j in (1, 0):
            grab = da[j] & (dx[j] == sx) & (dy[j] == sy) & (count < 6)
            count = count + grab.long()
            da[j] = da[j] & ~grab
            moves = da[j] & (dt[j] == 0)
            dt[j] = torch.where(moves, DIVER_MOVE_INTERVAL, dt[j] - da[j].long())
            dx[j] = dx[j] + moves.long() * (dr[j].long() * 2 - 1)
            da[j] = da[j] & (dx[j] >= 0) & (dx[j] <= 9)
            grab = moves & da[j] & (dx[j] == sx) & (dy[j] == sy) & (count < 6)
            count = count + grab.long()
            da[j] = da[j] & ~grab

        # Enemies: touching the player ends the episode (before and after moving); they move
        # when their timer runs out and leave the screen; one that moves into a bullet's cell
        # (and not onto the player) is removed with that bullet.
        sx16, sy16 = col(sx.to(_SMALL)), col(sy.to(_SMALL))
        you = (ex == sx16) & (ey == sy16)
        terminal = any_rows(ealive & you)
        moves = ealive & (etimer == 0)
        etimer = select(moves, speed16, etimer - ealive.to(_SMALL))
        ex = ex + moves.to(_SMALL) * (er.to(_SMALL) * 2 - 1)
        inside = (ex >= 0) & (ex <= 9)
        you = (ex == sx16) & (ey == sy16)
        terminal = terminal | any_rows(moves & inside & you)
        shooters = ealive & esub  # every sub here fires when due, even one removed below
        ealive = ealive & ~(moves & ~inside)
        eligible = moves & inside & ~you
        for j in (0, 1):  # claim order: subs, then fish, newest first (the largest ``order``)
            there = eligible & (ex == col(bx[j].to(_SMALL))) & (ey == col(by[j].to(_SMALL)))
            there = there & col(ba[j])
            first = (order * there.long() - (~there).long()).max(1).values
            hit = any_rows(there)
            claimed = there & (order == col(first))
            eligible = eligible & ~claimed
            ealive = ealive & ~claimed
            ba[j] = ba[j] & ~hit
            reward += hit.long()
        due = shooters & (eshot == 0)
        eshot = select(due, self._shot_interval, eshot - shooters.to(_SMALL))
        due = due & inside
        eb_left = s["eb_left"] | self._paint(ey, ex, due & ~er)
        eb_right = s["eb_right"] | self._paint(ey, ex, due & er)

        # Enemy bullets: hit the player before or after moving one cell; leave at the sides.
        cell = flat_cell(sy, sx).unsqueeze(1)
        hit_you = (eb_left | eb_right).view(n, 100).gather(1, cell).squeeze(1)
        no_col = torch.zeros_like(eb_left[:, :, :1])
        eb_left = torch.cat((eb_left[:, :, 1:], no_col), 2)
        eb_right = torch.cat((no_col, eb_right[:, :, :9]), 2)
        hit_you = hit_you | (eb_left | eb_right).view(n, 100).gather(1, cell).squeeze(1)
        terminal = terminal | hit_you

        # Timers, oxygen, surfacing.
        oxygen, surface = s["oxygen"], s["surface"]
        terminal = terminal | (oxygen <= 0)
        below = sy > 0
        arrive = ~below & ~surface
        terminal = terminal | (arrive & (count == 0))
        surfaced = arrive & (count != 0)
        full = surfaced & (count == 6)
        reward += torch.where(full, oxygen * 10 // MAX_OXYGEN, 0)
        count = torch.where(full, 0, count) - surfaced.long()
        oxygen = torch.where(below, oxygen - 1, torch.where(surfaced, MAX_OXYGEN, oxygen))
        surface = (surface & ~below) | surfaced
        e_spawn_speed, ramp_index = s["e_spawn_speed"], s["ramp_index"]
        ramp = surfaced & ((e_spawn_speed > 1) | (move_speed > 2))
        if not self.ramping:
            ramp = torch.zeros_like(ramp)
        faster = ramp & (move_speed > 2) & (ramp_index % 2 == 1)

        fb = self._compact(torch.stack(bx, 1), fby, fbr, torch.stack(ba, 1))
        dv = self._compact(torch.stack(dx, 1), dvy, dvr, torch.stack(da, 1), torch.stack(dt, 1))
        state = {
            "sub_x": sx,
            "sub_y": sy,
            "sub_right": s_right,
            "oxygen": oxygen,
            "diver_count": count,
            "e_spawn_speed": e_spawn_speed - (ramp & (e_spawn_speed > 1)).long(),
            "e_spawn_timer": e_spawn_timer - (e_spawn_timer > 0).long(),
            "d_spawn_timer": d_spawn_timer - (d_spawn_timer > 0).long(),
            "move_speed": move_speed - faster.long(),
            "ramp_index": ramp_index + ramp.long(),
            "shot_timer": shot_timer - (shot_timer > 0).long(),
            "surface": surface,
            "next_id": next_id,
            "fb_x": fb[0],
            "fb_y": fb[1],
            "fb_right": fb[2],
            "fb_alive": fb[3],
            "dv_x": dv[0],
            "dv_y": dv[1],
            "dv_right": dv[2],
            "dv_alive": dv[3],
            "dv_timer": dv[4],
            "en_x": ex,
            "en_y": ey,
            "en_timer": etimer,
            "en_shot": eshot,
            "en_id": eid,
            "en_right": er,
            "en_sub": esub,
            "en_alive": ealive,
            "eb_left": eb_left,
            "eb_right": eb_right,
        }
        return state, reward.float(), terminal

    def _paint(self, y: torch.Tensor, x: torch.Tensor, present: torch.Tensor) -> torch.Tensor:
        """A [N, 10, 10] grid with the cells (y, x) [N, K] set where ``present``."""
        idx = select(present, flat_cell(y, x), self._sink100).long()
        grid = torch.zeros(self.num_envs, 101, dtype=torch.bool, device=self.device)
        grid.scatter_(1, idx, True)
        return grid[:, :100].reshape(self.num_envs, 10, 10)

    @staticmethod
    def _compact(*fields: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Two-slot tables [N, 2] (``alive`` the 4th field) with a live slot 1 after a dead
        slot 0 moved down, so that slot order stays list order and new entries append."""
        alive = fields[3]
        down = ~alive[:, 0] & alive[:, 1]
        out = []
        for i, f in enumerate(fields):
            first = torch.where(down, f[:, 1], f[:, 0])
            second = f[:, 1] & ~down if i == 3 else f[:, 1]
            out.append(torch.stack((first, second), 1))
        return tuple(out)

    def observe(self, s: State) -> torch.Tensor:
        n, rows = self.num_envs, self._rows
        sx, sy = s["sub_x"], s["sub_y"]
        # What is at most a few per row as bit rows first: the player, its bullets and divers,
        # the gauges; then the enemy bullets' grid; then the enemy tables, scattered.
        bits = torch.zeros(n, 10, 10, dtype=torch.int64, device=self.device)
        bits[:, 0] = cell_bits(rows, sy, sx)
        # the back cell; at x = 0 facing right numpy's index -1 would wrap (never reached)
        bits[:, 1] = cell_bits(rows, sy, (sx - (s["sub_right"].long() * 2 - 1)) % 10)
        fb = cell_bits(rows, s["fb_y"], s["fb_x"]) * s["fb_alive"].long().unsqueeze(2)
        bits[:, 2] = fb[:, 0] | fb[:, 1]
        dx, dy, dalive = s["dv_x"], s["dv_y"], s["dv_alive"].long().unsqueeze(2)
        dv = cell_bits(rows, dy, dx) * dalive
        bits[:, 9] = dv[:, 0] | dv[:, 1]
        back = dx - (s["dv_right"].long() * 2 - 1)
        inside = ((back >= 0) & (back <= 9)).long().unsqueeze(2)
        trail = cell_bits(rows, dy, back.clamp(0, 9)) * dalive * inside
        bits[:, 3] = trail[:, 0] | trail[:, 1]
        oxygen = s["oxygen"].clamp(min=0) * 10 // MAX_OXYGEN
        bits[:, 7, 9] = (1 << oxygen) - 1  # cells [0, oxygen)
        # numpy's [9 - count : 9]: cells 9 - count .. 8, none when the count is negative
        count = s["diver_count"].clamp(min=0)
        bits[:, 8, 9] = ((1 << count) - 1) << (9 - count)
        obs = self._bits.expand(bits)
        eb = s["eb_left"] | s["eb_right"]
        obs[:, 400:500] = eb.view(n, 100)
        # Enemies: scattered, the absent ones onto the player's own cell, which is set anyway.
        sink = flat_cell(sy, sx).unsqueeze(1).to(_SMALL)
        ex, ey, alive, sub = s["en_x"], s["en_y"], s["en_alive"], s["en_sub"]
        cell = flat_cell(ey, ex.clamp(0, 9))
        obs.scatter_(1, select(alive & ~sub, 500 + cell, sink).long(), 1)
        obs.scatter_(1, select(alive & sub, 600 + cell, sink).long(), 1)
        back = ex - (s["en_right"].to(_SMALL) * 2 - 1)
        trail = alive & (back >= 0) & (back <= 9)
        obs.scatter_(1, select(trail, 300 + flat_cell(ey, back.clamp(0, 9)), sink).long(), 1)
        return obs
