"""``python -m distrl <command> ...``: the ``distrl`` command (``distrl.cli.run``)."""

from distrl.cli import run

run()
