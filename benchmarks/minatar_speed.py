"""Env-steps per second of the batched MinAtar games, beside the reference ``minatar`` package.

    python -m benchmarks.minatar_speed                          # N = 64, 1024, 4096 on CPU
    python -m benchmarks.minatar_speed --sizes 4096 --device cuda --games breakout

Ours: ``step`` with random actions on one thread (``--threads``), timed after a warm-up, the
median of ``--repeats`` runs. The reference: one ``minatar.Environment`` (sticky actions, its
default difficulty ramp) stepped with random minimal-set actions, ``state()`` read every step
(the observation ours returns) and reset at game over; skipped when minatar is not installed.
Each game's runs alternate (ours at every size, then the reference) so that load from other
processes falls on all of them alike. Results: a table and ``--out``/minatar_speed.csv.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from benchmarks import common


@dataclass(frozen=True)
class MinAtarSpeedArgs:
    sizes: str = "64,1024,4096"
    """Batch sizes N of our envs."""
    games: str = "asterix,breakout,freeway,seaquest,space_invaders"
    """Games (the reference's names)."""
    seconds: float = 2.0
    """Time per measurement (steps are taken until it has passed)."""
    repeats: int = 3
    """Measurements per case; the median is reported."""
    threads: int = 1
    """Intra-op threads."""
    device: str = "cpu"
    """Torch device of our envs."""
    reference: bool = True
    """Also measure the reference package (one env)."""
    out: str | None = None
    """Results directory (default bench_out/minatar_speed)."""


def ours(game: str, n: int, device: str, seconds: float) -> float:
    from distrl.envs.minatar import GAMES

    env = GAMES[game](n, device)
    env.reset(seed=0)
    gen = torch.Generator(device=device).manual_seed(0)
    actions = [
        torch.randint(env.action_space.n, (n,), generator=gen, device=device) for _ in range(64)
    ]
    for a in actions[:16]:  # warm-up
        env.step(a)
    sync = torch.cuda.synchronize if env.device.type == "cuda" else lambda: None
    sync()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for a in actions:
            env.step(a)
        steps += len(actions)
        sync()
    return steps * n / (time.perf_counter() - start)


def reference(game: str, seconds: float) -> float | None:
    try:
        import numpy as np
        from minatar import Environment
    except ImportError:
        return None
    env = Environment(game)
    env.seed(0)
    env.reset()
    moves = env.minimal_action_set()
    rng = np.random.default_rng(0)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for a in rng.integers(len(moves), size=256):
            _, terminal = env.act(moves[a])
            env.state()
            if terminal:
                env.reset()
        steps += 256
    return steps / (time.perf_counter() - start)


def minatar_speed(args: MinAtarSpeedArgs) -> list[dict]:
    torch.set_num_threads(args.threads)
    machine = common.header("MinAtar env-steps/s: batched torch vs the reference package")
    sizes = common.parse_ints(args.sizes)
    rows = []
    for game in [g.strip() for g in args.games.split(",") if g.strip()]:
        runs: dict[str, list[float]] = {}
        for _ in range(args.repeats):
            for n in sizes:
                runs.setdefault(f"N={n}", []).append(ours(game, n, args.device, args.seconds))
            if args.reference:
                ref = reference(game, args.seconds)
                if ref is not None:
                    runs.setdefault("reference", []).append(ref)
        for case, sps in runs.items():
            rows.append(
                {
                    "game": game,
                    "case": case,
                    "device": "cpu (numpy)" if case == "reference" else args.device,
                    "threads": args.threads,
                    "sps_median": statistics.median(sps),
                    "sps_runs": " ".join(f"{s:.0f}" for s in sps),
                    "cpu": machine["cpu"],
                }
            )
    common.print_table(
        "env-steps/s (median)", rows, ["game", "case", "device", "threads", "sps_median"]
    )
    out = common.out_dir(args.out, "minatar_speed")
    common.write_csv(out / "minatar_speed.csv", rows)
    print(f"results: {out / 'minatar_speed.csv'}")
    return rows


def main() -> None:
    import sys

    from distrl.args import parse_flags  # here (tyro): the functions above run without it

    minatar_speed(parse_flags(MinAtarSpeedArgs, sys.argv[1:], "python -m benchmarks.minatar_speed"))


if __name__ == "__main__":
    main()
