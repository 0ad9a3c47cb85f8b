"""No import cycle among distrl's modules, also none hidden in a function-local import: the
graph is built from every ``import`` statement of src/distrl (module level and inside functions;
those under ``if TYPE_CHECKING:`` are left out, they never run)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def modules(root: Path = SRC) -> dict[str, Path]:
    out = {}
    for path in (root / "distrl").rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of ``tree`` that runs: module level and inside functions, but not
    those under ``if TYPE_CHECKING:``."""
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for stmt in node.body
        for inner in ast.walk(stmt)
    }
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in typing_only
    ]


def resolve(
    name: str, node: ast.Import | ast.ImportFrom, known: set[str], package: bool = False
) -> set[str]:
    """The distrl modules one import statement of module ``name`` imports."""
    out: set[str] = set()
    if isinstance(node, ast.Import):
        out |= {a.name for a in node.names if a.name in known}
    else:
        module = node.module or ""
        if node.level:
            base = name.split(".") if package else name.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            module = ".".join([*base, *([node.module] if node.module else [])])
        for a in node.names:
            if f"{module}.{a.name}" in known:  # `from distrl import cli`: the module
                out.add(f"{module}.{a.name}")
            elif module in known:
                out.add(module)
    return out


def imports(name: str, source: str, known: set[str], package: bool = False) -> set[str]:
    """The distrl modules ``source`` (module ``name``) imports anywhere in its body."""
    out: set[str] = set()
    for node in runtime_imports(ast.parse(source)):
        out |= resolve(name, node, known, package)
    out.discard(name)
    return out


def graph(root: Path = SRC) -> dict[str, set[str]]:
    mods = modules(root)
    known = set(mods)
    return {
        name: imports(name, path.read_text(), known, path.name == "__init__.py")
        for name, path in mods.items()
    }


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_in_the_package() -> None:
    g = graph()
    assert len(g) > 50 and "distrl.session" in g["distrl.cli"] | g["distrl.api"]
    assert not cycles(g), f"import cycles (function-local imports count): {cycles(g)}"


def test_the_scan_sees_function_local_and_relative_imports() -> None:
    known = {"distrl.a", "distrl.b", "distrl.pkg", "distrl.pkg.c"}
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from distrl import b\n"
        "def f():\n    from distrl.pkg import c\n"
        "def g():\n    import distrl.a\n"
    )
    assert imports("distrl.x", source, known) == {"distrl.pkg.c", "distrl.a"}
    assert imports("distrl.pkg.c", "from . import x\nfrom .. import a\n", known) == {
        "distrl.pkg",
        "distrl.a",
    }
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
