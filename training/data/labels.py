"""Label values -> class ids: the classes are the values that occur.

Strings are named by themselves in sorted order; whole numbers (star ratings, 0/1 flags)
are named by their own values in numeric order, so stars 1/3/5 make three classes '1', '3',
'5' and never six classes '0'..'5'. Numeric labels are ordered (a mean absolute error makes
sense for them). A fixed list of names overrides both: strings must be among the names, and
whole numbers are then indexes into them (as a Hugging Face ``ClassLabel`` column holds).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from attnserve.training.data.core import DataError

SHOWN = 5  # rows or values quoted in an error message


@dataclass(frozen=True)
class LabelColumn:
    """One part's raw label values, where they came from, and its ClassLabel names if any."""

    values: Sequence[Any]
    source: str
    class_names: Sequence[str] | None = None


@dataclass(frozen=True)
class ClassMap:
    names: tuple[str, ...]
    ordered: bool  # the classes are ranks (numeric labels)
    ids: list[list[int]]  # one list of class ids per LabelColumn, in input order


def rows(numbers: Sequence[int]) -> str:
    shown = ", ".join(str(r) for r in numbers[:SHOWN])
    return shown + (", ..." if len(numbers) > SHOWN else "")


def _check_present(part: LabelColumn, column: str) -> None:
    missing = [
        i + 1 for i, v in enumerate(part.values) if v is None or (isinstance(v, float) and math.isnan(v))
    ]
    if missing:
        raise DataError(f"{part.source}: {len(missing)} row(s) have no {column!r} (rows {rows(missing)})")


def _kind(part: LabelColumn, column: str) -> str:
    if all(isinstance(v, str) for v in part.values):
        return "str"
    if all(isinstance(v, int | float) and float(v).is_integer() for v in part.values):
        return "int"
    kinds = sorted({type(v).__name__ for v in part.values})
    raise DataError(
        f"{part.source}: {column!r} must hold only strings or only whole numbers, found {', '.join(kinds)}"
    )


def map_labels(parts: Sequence[LabelColumn], column: str, names: Sequence[str] | None = None) -> ClassMap:
    """Class names and ids for every part, built from the values that occur in all of them."""
    if names is not None and len(set(names)) != len(names):
        raise DataError(f"label names must be unique, got {list(names)}")
    for part in parts:
        _check_present(part, column)
    kinds = {_kind(part, column) for part in parts}
    if len(kinds) > 1:
        raise DataError(f"{column!r} holds strings in one part of the data and numbers in another")
    if kinds == {"str"}:
        occurring = sorted({v for part in parts for v in part.values})
        given = tuple(names) if names is not None else tuple(occurring)
        index = {n: i for i, n in enumerate(given)}
        for part in parts:
            unknown = sorted(set(part.values) - set(index))
            if unknown:
                raise DataError(
                    f"{part.source}: labels {unknown[:SHOWN]} in {column!r} are not among {list(given)}"
                )
        return ClassMap(given, False, [[index[v] for v in part.values] for part in parts])
    ints = [[int(v) for v in part.values] for part in parts]
    declared = names if names is not None else parts[0].class_names
    if declared is not None:
        # The numbers index a list of names: keep the named classes that occur, in their order.
        for part, values in zip(parts, ints, strict=True):
            bad = [i + 1 for i, v in enumerate(values) if not 0 <= v < len(declared)]
            if bad:
                raise DataError(
                    f"{part.source}: class ids in {column!r} outside 0..{len(declared) - 1} "
                    f"(rows {rows(bad)}); the label names are {list(declared)}"
                )
        kept = sorted({v for values in ints for v in values}) if names is None else range(len(declared))
        index = {v: i for i, v in enumerate(kept)}
        return ClassMap(tuple(declared[v] for v in kept), False, [[index[v] for v in vs] for vs in ints])
    occurring_ints = sorted({v for values in ints for v in values})
    index = {v: i for i, v in enumerate(occurring_ints)}
    return ClassMap(tuple(str(v) for v in occurring_ints), True, [[index[v] for v in vs] for vs in ints])
