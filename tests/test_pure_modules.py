"""Pure modules (algorithms/, storage/, policy/, envs/) never import
the distributed package, never log and never write files: DESIGN.md's contract, checked."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "distrl"
PURE = [p for d in ("algorithms", "storage", "policy", "envs") for p in (SRC / d).rglob("*.py")]
FORBIDDEN_MODULES = ("torch.distributed", "logging", "distrl.distributed", "distrl.telemetry")
FORBIDDEN_CALLS = ("print", "open", "write_text", "write_bytes", "torch.save")


def offences(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        bad = [n for n in names if n.startswith(FORBIDDEN_MODULES)]
        found += [f"{node.lineno}: imports {n}" for n in bad]
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            dotted = ast.unparse(f)
            if name in FORBIDDEN_CALLS or dotted in FORBIDDEN_CALLS:
                found.append(f"{node.lineno}: calls {dotted}")
    return found


def test_pure_modules_stay_pure() -> None:
    assert len(PURE) > 10
    bad = [f"{p.relative_to(SRC)}:{o}" for p in PURE for o in offences(p.read_text())]
    assert not bad, "\n".join(bad)


def test_the_scan_catches_offences() -> None:
    assert offences("import torch.distributed as dist\n")
    assert offences("from torch import distributed\n")
    assert offences("import logging\n")
    assert offences("print('x')\n")
    assert offences("Path('x').write_text('y')\n")
    assert not offences("import torch\nx = torch.zeros(3)\n")
