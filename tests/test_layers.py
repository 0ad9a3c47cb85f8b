"""Layers that point down: the lower packages (``envs/``, ``policy/``, ``storage/``,
``algorithms/``) import each other and the few leaf modules in ``ALLOWED``, never the runner, the
strategies (``distributed/``), the package root ``distrl`` or any other module above them.

Every ``import`` statement counts, module level and inside functions (a function-local import
runs too); those under ``if TYPE_CHECKING:`` are left out, they never run. The statements are
read with ``tests/test_imports.py``'s scan, which builds the cycle check's graph."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.test_imports import SRC, graph, modules, resolve, runtime_imports

LOWER = ("envs", "policy", "storage", "algorithms")

ALLOWED = {
    # the one config tree (frozen dataclasses): every layer reads its settings from it
    "distrl.config": "imports nothing of distrl",
    # the install hints ("pip install ...") an env names when its extra is missing
    "distrl.install": "imports nothing of distrl",
    # the Hooks class a task carries (register_task(..., hooks=)); the runner calls them
    "distrl.hooks": "imports nothing of distrl at run time (Runner only for the type checker)",
}
"""The modules outside the lower packages that they may import, each a leaf (checked below):
one that imported something above would bring that in with it."""


def is_lower(module: str) -> bool:
    parts = module.split(".")
    return len(parts) > 1 and parts[0] == "distrl" and parts[1] in LOWER


def violations(name: str, source: str, known: set[str], package: bool = False) -> list[str]:
    """``line: statement imports module`` for each import of module ``name`` that points up."""
    found = []
    for node in sorted(runtime_imports(ast.parse(source)), key=lambda n: n.lineno):
        for target in sorted(resolve(name, node, known, package)):
            if not is_lower(target) and target not in ALLOWED:
                found.append(f"{node.lineno}: `{ast.unparse(node)}` imports {target}")
    return found


def lower_modules() -> dict[str, Path]:
    return {name: path for name, path in modules().items() if is_lower(name)}


def test_lower_packages_import_nothing_above_them() -> None:
    mods = modules()
    lower = lower_modules()
    assert "distrl.envs.registry" in lower and len(lower) > 30
    bad = [
        f"{path.relative_to(SRC.parent)}:{v}"
        for name, path in sorted(lower.items())
        for v in violations(name, path.read_text(), set(mods), path.name == "__init__.py")
    ]
    assert not bad, (
        "the lower packages (" + ", ".join(LOWER) + ") import only each other and "
        f"{', '.join(ALLOWED)}; move what they need down instead:\n" + "\n".join(bad)
    )


def test_the_allowed_modules_are_leaves() -> None:
    mods = modules()
    for name in ALLOWED:
        path = mods[name]
        tree = ast.parse(path.read_text())
        up = {t for node in runtime_imports(tree) for t in resolve(name, node, set(mods))}
        assert not up - {name}, f"{name} ({path}) is allowed below everything but imports {up}"


# the package's top: what runs a training (the runner, the strategies, the session), the API and
# the command line
TOP = ("distrl.runner", "distrl.distributed", "distrl.session", "distrl.api", "distrl.cli")


def test_what_the_runner_and_strategies_import_from_the_top_level_sits_below_them() -> None:
    """``runner/base.py`` imports ``distrl.evaluation``, ``distrl.checkpoint``, ... from the top
    level: they are helpers below the runner, so none may lead back up, not even through
    another module (``evaluation`` takes ``Hooks`` from ``distrl.hooks``, not the runner's)."""
    g = graph()

    def above(module: str) -> bool:
        return any(module == t or module.startswith(t + ".") for t in TOP)

    used = {
        t
        for name, deps in g.items()
        if name.startswith(("distrl.runner.", "distrl.distributed."))
        for t in deps
        if t.count(".") == 1 and not above(t) and not is_lower(t)
    }
    assert "distrl.evaluation" in used and "distrl.checkpoint" in used
    bad = []
    for start in sorted(used):
        seen, todo = {start}, [start]
        while todo:
            for dep in g[todo.pop()] - seen:
                seen.add(dep)
                todo.append(dep)
        if any(above(m) for m in seen):
            bad.append(f"{start} leads to {sorted(m for m in seen if above(m))}")
    assert not bad, "\n".join(bad)


def test_the_scan_names_file_line_and_import() -> None:
    known = {"distrl", "distrl.config", "distrl.interrupts", "distrl.runner", "distrl.runner.hooks"}
    known |= {"distrl.envs", "distrl.envs.core", "distrl.policy"}
    source = (
        "from typing import TYPE_CHECKING\n"
        "from distrl.config import TrainConfig\n"
        "from distrl.envs.core import VecEnv\n"
        "from . import core\n"
        "if TYPE_CHECKING:\n    from distrl.runner.hooks import Hooks\n"
        "def f():\n    from distrl.runner.hooks import Hooks\n"
        "from distrl import __version__\n"
        "from distrl import interrupts\n"
        "import distrl\n"
        "from ..runner import hooks\n"
    )
    assert violations("distrl.envs.x", source, known) == [
        "8: `from distrl.runner.hooks import Hooks` imports distrl.runner.hooks",
        "9: `from distrl import __version__` imports distrl",
        "10: `from distrl import interrupts` imports distrl.interrupts",
        "11: `import distrl` imports distrl",
        "12: `from ..runner import hooks` imports distrl.runner.hooks",
    ]
