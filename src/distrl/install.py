"""How to install distrl, its extras and torch: the one recipe that every error hint, `distrl
list`, the README and docs/troubleshooting.md give (tests/test_package.py checks the docs say it).

distrl is not on PyPI: it installs from a checkout of its repository (``pip install 'distrl[x]'``
would find nothing, or someone else's package), with the exact versions ``constraints.txt``
pins. Which torch build pip takes is the index's choice: PyPI serves the CUDA build on Linux.
"""

from __future__ import annotations

CONSTRAINTS = "constraints.txt"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PYPI_INDEX = "https://pypi.org/simple"

TORCH_BUILDS = (
    "torch from PyPI is the CUDA build on Linux, several GB; for the CPU build add "
    f"--index-url {TORCH_CPU_INDEX} --extra-index-url {PYPI_INDEX}"
)
"""The CPU-or-CUDA choice, as the README and the hints that install torch say it."""


def pip_install(extras: str = "") -> str:
    """The command that installs distrl with ``extras`` (e.g. ``"mujoco"`` or ``"dev,video"``),
    run in the distrl checkout: editable, with the pinned versions."""
    target = f"'.[{extras}]'" if extras else "."
    return f"pip install -c {CONSTRAINTS} -e {target}"


def torch_install(spec: str) -> str:
    """The command that installs a torch matching ``spec`` (e.g. ``torch>=2.10``), and the
    choice of build."""
    return f"pip install -c {CONSTRAINTS} '{spec}' ({TORCH_BUILDS})"
