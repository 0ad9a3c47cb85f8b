"""Every torch.load under src/ passes weights_only=True: unpickling a file may run its code."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _torch_load_calls(tree: ast.AST) -> list[ast.Call]:
    """Calls of torch.load / torch.serialization.load / a bare `load` imported from torch."""
    from_torch = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module in ("torch", "torch.serialization")
        for alias in node.names
        if alias.name == "load"
    }
    calls = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        dotted = ast.unparse(f)
        if dotted in ("torch.load", "torch.serialization.load") or (
            isinstance(f, ast.Name) and f.id in from_torch
        ):
            calls.append(node)
    return calls


def _weights_only_true(call: ast.Call) -> bool:
    return any(
        kw.arg == "weights_only" and isinstance(kw.value, ast.Constant) and kw.value.value is True
        for kw in call.keywords
    )


def test_every_torch_load_under_src_uses_weights_only():
    offenders, seen = [], 0
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        calls = _torch_load_calls(tree)
        seen += len(calls)
        offenders += [
            f"{path.relative_to(SRC.parent)}:{c.lineno}: {ast.unparse(c)}"
            for c in calls
            if not _weights_only_true(c)
        ]
        # An alias (`f = torch.load`, `partial(torch.load, ...)`) would hide the call from the
        # match above; refuse any reference to torch.load that is not itself a checked call.
        called = {id(c.func) for c in calls}
        offenders += [
            f"{path.relative_to(SRC.parent)}:{n.lineno}: torch.load used other than as a call"
            for n in ast.walk(tree)
            if isinstance(n, ast.Attribute)
            and ast.unparse(n) in ("torch.load", "torch.serialization.load")
            and id(n) not in called
        ]
    assert seen > 0, "no torch.load call found under src/: is the scan looking in the right place?"
    assert not offenders, "torch.load without weights_only=True:\n" + "\n".join(offenders)


def test_scan_detects_an_unsafe_call():
    tree = ast.parse("import torch\nx = torch.load(p, map_location='cpu')\n")
    (call,) = _torch_load_calls(tree)
    assert not _weights_only_true(call)
    tree = ast.parse("from torch import load as L\nx = L(p, weights_only=True)\n")
    (call,) = _torch_load_calls(tree)
    assert _weights_only_true(call)
    tree = ast.parse("import torch\nx = torch.load(p, weights_only=False)\n")
    (call,) = _torch_load_calls(tree)
    assert not _weights_only_true(call)
