"""One process of a population's pool (``distrl/population.py``): it trains one member's
generation after another in the same process, so that a generation of a one-process member
costs no new interpreter, no ``import torch`` and no new env.

The controller writes the path of a member's config (``member_<k>/pbt_config.yaml``) as one line
on this process's stdin; the worker trains it with ``--resume auto`` in the member's run
directory (its console appended to the member's ``log.txt``) and answers with one line on its
stdout: the code a ``distrl train`` of that generation would have exited with (0, the signal's
code after SIGINT or SIGTERM, 1 after an error, whose traceback is in the log). An empty line or
the end of stdin ends it. A signal while it waits for work ends it at once.

Started as ``python -m distrl.population_worker [--import MODULE ...]``.
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

from distrl import openmp

openmp.set_defaults()  # before torch loads (distrl/openmp.py), as every distrl process


def train_one(config: Path) -> int:
    """One member's generation; its console into its ``log.txt``; the exit code."""
    import dataclasses

    from distrl import interrupts, session
    from distrl.args import load_config_file
    from distrl.safe_files import safe_open

    run_dir = config.parent
    try:
        log = safe_open(run_dir / "log.txt", "ab")  # never through a link
    except OSError:
        return 1
    with log:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            cfg = load_config_file(config)
            cfg = dataclasses.replace(cfg, run_dir=str(run_dir), resume="auto")
            final = session.run_training(cfg)
            return interrupts.exit_code(final.get("interrupted"))
        except Exception:
            traceback.print_exc()
            return 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()


def main(argv: list[str]) -> int:
    from distrl.args import take_imports

    take_imports(argv)  # the population's --import modules, as every member's ranks
    reply = os.fdopen(os.dup(1), "w", buffering=1)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)  # nothing but the answers reaches the controller's pipe
    for line in sys.stdin:
        path = line.strip()
        if not path:
            break
        code = train_one(Path(path))
        os.dup2(null, 1)
        os.dup2(null, 2)
        reply.write(f"{code}\n")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:  # a signal while idle
        sys.exit(130)
