"""Driving the reference ``minatar`` package beside our batched games, for the parity tests.

``RecordingRandom`` stands in for the reference's ``numpy.random.RandomState`` and logs every
draw; ``decode_*`` turn one step's log into the uniform columns our ``step_with_uniforms`` reads
(a randint result k of n values becomes u = (k + 0.5) / n, a rand() compared with p stays itself
unless float32 rounding would flip the comparison); columns the reference did not draw are filled
with fresh noise, which our dynamics must ignore. ``to_row`` / ``from_ref`` read a reference
game's state into our layout (to compare hidden state, and to start both from a harder state).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

Log = list[tuple[Any, ...]]


class RecordingRandom:
    """The two RandomState methods the reference calls, logging each result in order."""

    def __init__(self, seed: int) -> None:
        self._rs = np.random.RandomState(seed)
        self.log: Log = []

    def rand(self, *size: int) -> Any:
        v = self._rs.rand(*size)
        self.log.append(("rand", np.copy(v)))
        return v

    def randint(self, low: int, high: int | None = None, size: int | None = None) -> Any:
        v = self._rs.randint(low, high, size)
        self.log.append(("randint", low, high, np.copy(v)))  # the caller may change v in place
        return v

    def take(self) -> Log:
        out, self.log = self.log, []
        return out


def bern(v: Any, p: float) -> np.ndarray:
    """A uniform u (float32) with (u < p) == (v < p) as torch compares it (p in float32)."""
    v = np.asarray(v, dtype=np.float64)
    u = v.astype(np.float32)
    p32 = np.float32(p)
    wrong = (u < p32) != (v < p)
    below = np.nextafter(p32, np.float32(0))
    return np.where(wrong, np.where(v < p, below, p32), u).astype(np.float32)


def integer(k: Any, n: int) -> np.ndarray:
    """The uniform our ``uniform_int(u, n)`` maps to k."""
    return ((np.asarray(k, dtype=np.float64) + 0.5) / n).astype(np.float32)


def _expect(entry: tuple[Any, ...], kind: str, low: int | None = None) -> Any:
    assert entry[0] == kind, f"expected a {kind} draw, got {entry}"
    if low is not None:
        assert entry[1] == low, entry
    return entry[-1]


def decode_asterix_step(log: Log, cols: np.ndarray) -> None:
    if not log:
        return
    cols[0] = bern(_expect(log[0], "rand"), 0.5)
    cols[1] = bern(_expect(log[1], "rand"), 1 / 3)
    if len(log) == 3:  # a free slot: randint(#free)
        n = log[2][1]
        cols[2] = integer(_expect(log[2], "randint"), n)
    assert len(log) in (2, 3), log


def decode_breakout_reset(log: Log, cols: np.ndarray) -> None:
    assert len(log) == 1, log
    cols[0] = integer(_expect(log[0], "randint", 2), 2)


def decode_freeway_cars(log: Log, cols: np.ndarray) -> None:
    if not log:
        return
    assert len(log) == 2, log
    cols[:8] = integer(_expect(log[0], "randint", 1) - 1, 5)
    cols[8:] = bern(_expect(log[1], "rand"), 0.5)


def decode_seaquest_step(log: Log, cols: np.ndarray) -> None:
    rest = list(log)
    if len(rest) in (3, 5):  # an enemy spawn first: rand, rand, randint(1, 9)
        cols[0] = bern(_expect(rest[0], "rand"), 0.5)
        cols[1] = bern(_expect(rest[1], "rand"), 1 / 3)
        cols[2] = integer(_expect(rest[2], "randint", 1) - 1, 8)
        rest = rest[3:]
    if rest:  # a diver: rand, randint(1, 9)
        assert len(rest) == 2, log
        cols[3] = bern(_expect(rest[0], "rand"), 0.5)
        cols[4] = integer(_expect(rest[1], "randint", 1) - 1, 8)


def _none(log: Log, cols: np.ndarray) -> None:
    assert not log, log


DECODE_STEP: dict[str, Callable[[Log, np.ndarray], None]] = {
    "asterix": decode_asterix_step,
    "breakout": _none,
    "freeway": decode_freeway_cars,
    "seaquest": decode_seaquest_step,
    "space_invaders": _none,
}
DECODE_RESET: dict[str, Callable[[Log, np.ndarray], None]] = {
    "asterix": _none,
    "breakout": decode_breakout_reset,
    "freeway": decode_freeway_cars,
    "seaquest": _none,
    "space_invaders": _none,
}


# --- reference state in our layout (one row) -------------------------------------------------


def from_ref(game: str, e: Any) -> dict[str, Any]:
    """The reference game ``e`` (an ``Environment.env``) as our state fields for one row."""
    return _FROM_REF[game](e)


def _bit_rows(grid: Any) -> np.ndarray:
    """A 10x10 grid as our bit rows: bit x of row y set when cell (y, x) is."""
    return ((np.asarray(grid) != 0) * (1 << np.arange(10))).sum(1)


def _breakout(e: Any) -> dict[str, Any]:
    return {
        "ball_x": e.ball_x,
        "ball_y": e.ball_y,
        "ball_dir": e.ball_dir,
        "pos": e.pos,
        "last_x": e.last_x,
        "last_y": e.last_y,
        "strike": e.strike,
        "bricks": _bit_rows(e.brick_map),
    }


def _asterix(e: Any) -> dict[str, Any]:
    ents = e.entities
    return {
        "player_x": e.player_x,
        "player_y": e.player_y,
        "ent_x": [x[0] if x is not None else 0 for x in ents],
        "ent_right": [bool(x[2]) if x is not None else False for x in ents],
        "ent_gold": [bool(x[3]) if x is not None else False for x in ents],
        "ent_alive": [x is not None for x in ents],
        "spawn_speed": e.spawn_speed,
        "spawn_timer": e.spawn_timer,
        "move_speed": e.move_speed,
        "move_timer": e.move_timer,
        "ramp_timer": e.ramp_timer,
        "ramp_index": e.ramp_index,
    }


def _freeway(e: Any) -> dict[str, Any]:
    return {
        "pos": e.pos,
        "move_timer": e.move_timer,
        "terminate_timer": e.terminate_timer,
        "car_x": [c[0] for c in e.cars],
        "car_timer": [c[2] for c in e.cars],
        "car_speed": [c[3] for c in e.cars],
    }


def _space_invaders(e: Any) -> dict[str, Any]:
    return {
        "pos": e.pos,
        "f_bullets": _bit_rows(e.f_bullet_map),
        "e_bullets": _bit_rows(e.e_bullet_map),
        "aliens": _bit_rows(e.alien_map),
        "alien_dir": e.alien_dir,
        "move_interval": e.enemy_move_interval,
        "alien_move_timer": e.alien_move_timer,
        "alien_shot_timer": e.alien_shot_timer,
        "ramp_index": e.ramp_index,
        "shot_timer": e.shot_timer,
    }


def _slots(items: list[list[Any]], k: int, fields: int) -> list[list[Any]]:
    assert len(items) <= k, f"{len(items)} entities, more than the {k} slots"
    return [list(items[i][:fields]) if i < len(items) else [0] * fields for i in range(k)]


def _seaquest(e: Any) -> dict[str, Any]:
    from distrl.envs.minatar.seaquest import ENEMY_SLOTS

    fb = _slots(e.f_bullets, 2, 3)
    dv = _slots(e.divers, 2, 4)
    # fish, then subs: each list's order is its spawn order; fish and subs never compete
    enemies = [[*f[:4], 0, False] for f in e.e_fish] + [[*s[:5], True] for s in e.e_subs]
    en = _slots(enemies, ENEMY_SLOTS, 6)
    eb = np.zeros((2, 10, 10), dtype=bool)
    for x, y, right in e.e_bullets:
        eb[int(bool(right)), y, x] = True
    return {
        "sub_x": e.sub_x,
        "sub_y": e.sub_y,
        "sub_right": bool(e.sub_or),
        "oxygen": e.oxygen,
        "diver_count": e.diver_count,
        "e_spawn_speed": e.e_spawn_speed,
        "e_spawn_timer": e.e_spawn_timer,
        "d_spawn_timer": e.d_spawn_timer,
        "move_speed": e.move_speed,
        "ramp_index": e.ramp_index,
        "shot_timer": e.shot_timer,
        "surface": bool(e.surface),
        "next_id": len(enemies),
        "fb_x": [b[0] for b in fb],
        "fb_y": [b[1] for b in fb],
        "fb_right": [bool(b[2]) for b in fb],
        "fb_alive": [i < len(e.f_bullets) for i in range(2)],
        "dv_x": [d[0] for d in dv],
        "dv_y": [d[1] for d in dv],
        "dv_right": [bool(d[2]) for d in dv],
        "dv_timer": [d[3] for d in dv],
        "dv_alive": [i < len(e.divers) for i in range(2)],
        "en_x": [x[0] for x in en],
        "en_y": [x[1] for x in en],
        "en_right": [bool(x[2]) for x in en],
        "en_timer": [x[3] for x in en],
        "en_shot": [x[4] for x in en],
        "en_sub": [bool(x[5]) for x in en],
        "en_id": list(range(ENEMY_SLOTS)),
        "en_alive": [i < len(enemies) for i in range(ENEMY_SLOTS)],
        "eb_left": eb[0],
        "eb_right": eb[1],
    }


_FROM_REF: dict[str, Callable[[Any], dict[str, Any]]] = {
    "asterix": _asterix,
    "breakout": _breakout,
    "freeway": _freeway,
    "seaquest": _seaquest,
    "space_invaders": _space_invaders,
}


def write_row(state: dict[str, torch.Tensor], row: int, values: dict[str, Any]) -> None:
    """Set row ``row`` of our batched state to ``values`` (``from_ref``'s output)."""
    assert set(values) == set(state), set(values) ^ set(state)
    for name, t in state.items():
        t[row] = torch.as_tensor(np.asarray(values[name]), dtype=t.dtype).reshape(t[row].shape)


def canonical(game: str, row: dict[str, np.ndarray]) -> dict[str, Any]:
    """One env's state (numpy values per field) as comparable values, without what the reference
    cannot show: the fields of empty slots, and for Seaquest the enemies' slots and spawn
    numbers (the fish and the subs become lists in list order, as the reference holds them)."""
    r = dict(row)
    dead_fields = {
        "asterix": {"ent_alive": ("ent_x", "ent_right", "ent_gold")},
        "seaquest": {
            "fb_alive": ("fb_x", "fb_y", "fb_right"),
            "dv_alive": ("dv_x", "dv_y", "dv_right", "dv_timer"),
        },
    }.get(game, {})
    for alive, fields in dead_fields.items():
        for f in fields:
            r[f] = np.where(r[alive], r[f], 0)
    if game == "seaquest":
        alive = r.pop("en_alive")
        ids = r.pop("en_id")
        live = sorted(np.flatnonzero(alive), key=lambda i: ids[i])
        fields = ("en_x", "en_y", "en_right", "en_timer", "en_shot")
        table = [tuple(int(r[f][i]) for f in fields) for i in live]
        sub = [bool(r["en_sub"][i]) for i in live]
        r["fish"] = [t[:4] for t, is_sub in zip(table, sub, strict=True) if not is_sub]
        r["subs"] = [t for t, is_sub in zip(table, sub, strict=True) if is_sub]
        for f in (*fields, "en_sub", "next_id"):
            r.pop(f)
    return r


def canonical_rows(game: str, state: dict[str, torch.Tensor]) -> list[dict[str, Any]]:
    """``canonical`` of every env of a batched state."""
    arrays = {name: t.cpu().numpy() for name, t in state.items()}
    n = next(iter(arrays.values())).shape[0]
    return [canonical(game, {k: v[i] for k, v in arrays.items()}) for i in range(n)]


def canonical_ref(game: str, e: Any) -> dict[str, Any]:
    """``canonical`` of the reference game ``e``."""
    return canonical(game, {k: np.asarray(v) for k, v in from_ref(game, e).items()})
