"""Command-line flags generated from frozen config dataclasses, so the CLI cannot drift.

Model families share flag names (``--d-model``) with different defaults, so every model
flag is registered once, hidden, and the help lists them per family with that family's
defaults; after parsing, a flag that the chosen family does not have is refused by name.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
from typing import Any

_INLINE = re.compile(r"^\s+(\w+):\s*[^=]+=\s*[^#]+#\s*(.+)$")


def field_notes(cls: Any) -> dict[str, str]:
    """The inline comments of a dataclass's fields (``name: int = 1  # note``), by field name."""
    notes: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if "__dataclass_fields__" not in vars(klass):
            continue
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        for line in source.splitlines():
            match = _INLINE.match(line)
            if match:
                notes[match.group(1)] = match.group(2).strip()
    return notes


def flag(name: str, prefix: str = "") -> str:
    return "--" + prefix + name.replace("_", "-")


def _kind(default: Any) -> Any:
    return type(default) if default is not None and default is not dataclasses.MISSING else str


def add_dataclass_flags(
    parser: argparse._ActionsContainer,
    cls: Any,
    *,
    skip: frozenset[str] = frozenset(),
    notes: dict[str, str] | None = None,
    hidden: bool = False,
) -> None:
    """One flag per field (default None, so unset flags keep the dataclass's own default)."""
    notes = {**field_notes(cls), **(notes or {})}
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        note = notes.get(f.name, "")
        shown = argparse.SUPPRESS if hidden else (f"{note} " if note else "") + f"(default: {f.default})"
        if isinstance(f.default, bool):
            parser.add_argument(
                flag(f.name), dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=shown
            )
        else:
            parser.add_argument(
                flag(f.name),
                dest=f.name,
                type=_kind(f.default),
                default=None,
                metavar=_kind(f.default).__name__.upper(),
                help=shown,
            )


def picked(ns: argparse.Namespace, cls: Any, skip: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The fields of ``cls`` that were given on the command line."""
    return {
        f.name: getattr(ns, f.name)
        for f in dataclasses.fields(cls)
        if f.name not in skip and getattr(ns, f.name, None) is not None
    }


def family_help(families: dict[str, Any], skip: frozenset[str]) -> str:
    """Every family's flags with its defaults, for the end of --help."""
    lines = ["model flags, per family (--model picks the family; defaults shown):"]
    for name, model_cls in families.items():
        cls = model_cls.config_cls
        notes = field_notes(cls)
        lines.append(f"  {name}:")
        for f in dataclasses.fields(cls):
            if f.name in skip:
                continue
            note = f"  {notes[f.name]}" if f.name in notes else ""
            lines.append(f"    {flag(f.name):<18} {f.default!s:<10}{note}".rstrip())
    return "\n".join(lines)


def family_fields(families: dict[str, Any], skip: frozenset[str]) -> dict[str, list[str]]:
    """Field name -> the families that have it."""
    owners: dict[str, list[str]] = {}
    for name, model_cls in families.items():
        for f in dataclasses.fields(model_cls.config_cls):
            if f.name not in skip:
                owners.setdefault(f.name, []).append(name)
    return owners


def add_family_flags(parser: argparse.ArgumentParser, families: dict[str, Any], skip: frozenset[str]) -> None:
    """Every family's fields as hidden flags, each once (the help lists them per family)."""
    seen: set[str] = set()
    for model_cls in families.values():
        cls = model_cls.config_cls
        done = frozenset(f.name for f in dataclasses.fields(cls) if f.name in seen or f.name in skip)
        add_dataclass_flags(parser, cls, skip=done, hidden=True)
        seen |= {f.name for f in dataclasses.fields(cls)}
