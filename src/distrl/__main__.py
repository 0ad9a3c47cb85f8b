"""``python -m distrl <command> ...``: the ``distrl`` command (``distrl.cli.main``)."""

import sys

from distrl.cli import main

sys.exit(main())
