"""The common `train` overrides without tyro: ``--section.field VALUE`` (or ``=VALUE``) pairs,
each naming one scalar field of ``TrainConfig`` by its own name and written as tyro would take
it. tyro builds a parser for the whole config tree on every call, about a tenth of a second of
a small task's start-up; these words give the same config without one.

Anything else (a help request, an alias, a tuple or other non-scalar field, a value tyro would
refuse or convert otherwise, a flag given twice, a positional word) returns None, and tyro
parses the whole command as before, errors included. ``tests/test_quick_flags.py`` checks every
scalar field against tyro's parse.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any, Literal, NamedTuple

import tyro  # (imported by distrl.config already: its markers are read, no parser built)

from distrl.config import TrainConfig

_NONE = object()  # (a field that takes None: the word "None")


class Leaf(NamedTuple):
    """One field of a config tree that is not itself a section."""

    flag: str
    """Its flag without the dashes: ``agent.learning-rate``."""
    path: str
    """Its dotted field path: ``agent.learning_rate``."""
    hint: Any
    """Its type, out of any ``Annotated``."""
    markers: tuple[Any, ...]
    """The ``Annotated`` markers (tyro's aliases and the like)."""


@functools.cache
def leaves(cls: type = TrainConfig) -> tuple[Leaf, ...]:
    """Every leaf field of dataclass ``cls`` and its sections, in declaration order: the one
    walk of the config tree that the flag lists (``args.flag_names``, ``args.bool_flags``) and
    this module's fast path share."""
    hints = typing.get_type_hints(cls, include_extras=True)
    out: list[Leaf] = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        annotated = typing.get_origin(hint) is typing.Annotated
        base, *markers = typing.get_args(hint) if annotated else (hint,)
        if dataclasses.is_dataclass(base):
            for leaf in leaves(typing.cast(type, base)):
                path = f"{f.name}.{leaf.path}"
                out.append(leaf._replace(flag=path.replace("_", "-"), path=path))
        else:
            out.append(Leaf(f.name.replace("_", "-"), f.name, base, tuple(markers)))
    return tuple(out)


@functools.cache
def scalar_fields() -> dict[str, tuple[str, Any]]:
    """Flag (``agent.learning-rate``) -> (dotted field path, its type) for every leaf of
    ``TrainConfig`` whose type is a plain scalar: int, float, str, bool, a Literal of strings,
    or one of them or None. A field with tyro markers other than aliases is left out."""
    return {
        leaf.flag: (leaf.path, leaf.hint)
        for leaf in leaves()
        if _scalar(leaf.hint) and all(_aliases_only(m) for m in leaf.markers)
    }


def _aliases_only(marker: Any) -> bool:
    """A ``tyro.conf.arg`` that adds other names and nothing else."""
    if not dataclasses.is_dataclass(marker) or not hasattr(marker, "aliases"):
        return False
    rest = [getattr(marker, f.name) for f in dataclasses.fields(marker)]
    return all(v is None or v is tyro.MISSING_NONPROP or v is marker.aliases for v in rest)


def _scalar(hint: Any) -> bool:
    if hint in (int, float, str, bool):
        return True
    origin = typing.get_origin(hint)
    if origin is Literal:
        return all(isinstance(v, str) for v in typing.get_args(hint))
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        rest = [a for a in args if a is not type(None)]
        return len(args) == 2 and len(rest) == 1 and _scalar(rest[0])
    return False


def _value(hint: Any, word: str) -> Any:
    """``word`` as tyro takes it for ``hint``; None where tyro may differ or refuse (an empty
    word, or one that starts with a dash, is always tyro's)."""
    if not word or word.startswith("-"):
        return None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        if word == "None":
            return _NONE
        inner = next(a for a in typing.get_args(hint) if a is not type(None))
        return _value(inner, word)
    if hint is bool:
        return {"True": True, "False": False}.get(word)
    if origin is Literal:
        return word if word in typing.get_args(hint) else None
    if hint is str:
        return word if word != "None" else None
    if not word.isascii():
        return None
    if hint is int:
        return int(word) if word.isdigit() else None
    if hint is float:  # digits, one point, an exponent: not inf, nan or underscores
        mantissa, e, exponent = word.lower().partition("e")
        whole, _, frac = mantissa.partition(".")
        exponent = exponent.removeprefix("-").removeprefix("+")
        ok = (whole + frac).isdigit() and (exponent.isdigit() if e else True)
        return float(word) if ok else None
    return None


def parse(defaults: TrainConfig, argv: list[str]) -> TrainConfig | None:
    """``argv`` applied to ``defaults`` where every word pair is a plain scalar override
    (the module's docstring), else None (tyro's turn). Not validated: the caller does that."""
    fields = scalar_fields()
    values: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        word = argv[i]
        if not word.startswith("--"):
            return None
        flag, eq, value = word[2:].partition("=")
        if not eq:
            if i + 1 == len(argv):
                return None
            value = argv[i + 1]
            i += 1
        i += 1
        if flag not in fields or fields[flag][0] in values:
            return None
        path, hint = fields[flag]
        parsed = _value(hint, value)
        if parsed is None:
            return None
        values[path] = None if parsed is _NONE else parsed
    return _replace(defaults, values)


def _replace(obj: Any, values: dict[str, Any]) -> Any:
    own = {k: v for k, v in values.items() if "." not in k}
    for section in {k.split(".", 1)[0] for k in values if "." in k}:
        inner = {k.split(".", 1)[1]: v for k, v in values.items() if k.startswith(section + ".")}
        own[section] = _replace(getattr(obj, section), inner)
    return dataclasses.replace(obj, **own)
