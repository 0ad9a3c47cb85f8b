"""Writes Reach10's shipped init-state lists (src/distrl/envs/init_states/reach/<task>.json).

    .venv/bin/python -m tests.envs.reach_init_states

The lists are data, fixed once (like LIBERO's .init files); tests/envs/test_reach.py checks that
the shipped files are exactly what ``generate_init_states`` draws, so this only needs running
after a deliberate change of the suite.
"""

from __future__ import annotations

import json
from pathlib import Path

from distrl.envs.reach import INIT_STATE_SEED, REACH_TASKS, generate_init_states

OUT = Path(__file__).resolve().parents[2] / "src" / "distrl" / "envs" / "init_states" / "reach"


def render(task_name: str, rows: list[list[float]]) -> str:
    body = ",\n".join("    " + json.dumps(r) for r in rows)
    head = json.dumps({"task": task_name, "seed": INIT_STATE_SEED, "format": "[x, y, vx, vy]"})
    return head[:-1] + ', "init_states": [\n' + body + "\n]}\n"


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for task in REACH_TASKS:
        (OUT / f"{task.name}.json").write_text(render(task.name, generate_init_states(task)))
        print(OUT / f"{task.name}.json")


if __name__ == "__main__":
    main()
