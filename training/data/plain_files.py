"""Local CSV / TSV / JSON(L) / Parquet files, read without Hugging Face ``datasets``.

Reading a local file through ``datasets`` imports it with pandas (about 100 MB resident
from then on) and parses the whole file into an Arrow table that is then copied into Python
lists: for 120,000 long reviews the import, the table and the lists held 430 MB. A local
file needs none of that. Text formats are read a row at a time with the standard library,
keeping only the columns asked for; Parquet is read with pyarrow alone, those columns only.

What each format yields matches what ``datasets`` gave: JSON values as they are (a file is
JSON lines, or one array of objects), CSV cells as strings, except that a column whose every
non-empty cell is a whole number (or a number) becomes numbers, as pandas infers; an empty
cell is a missing value. Text columns stay strings whatever they hold.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnserve.training.data.core import DataError

FORMATS = {
    ".csv": "csv",
    ".tsv": "csv",
    ".json": "json",
    ".jsonl": "json",
    ".parquet": "parquet",
    ".pq": "parquet",
}


@dataclass(frozen=True)
class Columns:
    """The columns asked for that the source has, one value per row (None where a row has none)."""

    values: dict[str, list[Any]]
    available: list[str]  # every column of the source, for messages
    class_names: dict[str, list[str]] = field(default_factory=dict)  # a ClassLabel column's names


def read_labelled(path: Path, text_column: str, label_column: str) -> Columns:
    """A labelled file's text and label columns; DataError naming a missing file or column (and
    the columns the file has)."""
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    columns = read_file(path, text_column, [label_column])
    for column, kind in ((text_column, "text"), (label_column, "label")):
        if column not in columns.values:
            present = ", ".join(columns.available) or "none"
            raise DataError(f"{path} has no {kind} column {column!r}; it has {present}")
    return columns


def read_file(path: Path, text_column: str, other_columns: Sequence[str]) -> Columns:
    """``text_column`` and ``other_columns`` of a local file; a format error is a ``DataError``."""
    kind = FORMATS.get(path.suffix.lower())
    if kind is None:
        supported = ", ".join(sorted(FORMATS))
        raise DataError(f"{path}: unsupported file type {path.suffix!r}; use one of {supported}")
    wanted = [text_column, *other_columns]
    try:
        if kind == "parquet":
            return _parquet(path, wanted)
        if kind == "json":
            return _from_rows(_json_rows(path), wanted)
        columns = _from_rows(_csv_rows(path, "\t" if path.suffix.lower() == ".tsv" else ","), wanted)
    except DataError:
        raise
    except (OSError, UnicodeDecodeError, ValueError, csv.Error) as exc:
        raise DataError(f"cannot read {path} as {kind}: {exc}") from exc
    for name, values in columns.values.items():
        if name != text_column:
            columns.values[name] = _numbers(values)
    return columns


def _from_rows(rows: Iterator[dict[str, Any]], wanted: Sequence[str]) -> Columns:
    available: dict[str, None] = {}
    values: dict[str, list[Any]] = {name: [] for name in dict.fromkeys(wanted)}
    for row in rows:
        available.update(dict.fromkeys(row))
        for name, column in values.items():
            column.append(row.get(name))
    return Columns({k: v for k, v in values.items() if k in available}, list(available))


def _json_rows(path: Path) -> Iterator[dict[str, Any]]:
    with open(path, encoding="utf-8-sig") as fh:
        first = ""
        while not first.strip():
            first = fh.read(1)
            if not first:
                return  # an empty file: no rows
        fh.seek(0)
        if first == "[":  # one JSON array of objects
            document = json.load(fh)
            yield from (_object(row, f"item {i + 1}") for i, row in enumerate(document))
            return
        for number, line in enumerate(fh, 1):
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DataError(f"cannot read {path} as JSON lines: line {number}: {exc.msg}") from exc
                yield _object(row, f"line {number}")


def _object(row: Any, where: str) -> dict[str, Any]:
    if not isinstance(row, dict):
        raise DataError(f"{where} is a JSON {type(row).__name__}, not an object of named columns")
    return row


def _csv_rows(path: Path, delimiter: str) -> Iterator[dict[str, Any]]:
    with open(path, encoding="utf-8-sig", newline="") as fh:
        reader = csv.reader(fh, delimiter=delimiter)
        header = next(reader, None)
        if header is None:
            return
        for row in reader:
            if len(row) > len(header):
                raise DataError(
                    f"cannot read {path} as csv: line {reader.line_num} has {len(row)} fields, "
                    f"the header {len(header)}"
                )
            if row:  # a blank line is no row
                yield {name: cell if cell != "" else None for name, cell in zip(header, row, strict=False)}


def _numbers(values: list[str | None]) -> list[Any]:
    """CSV cells as ints, else floats, when every cell present reads as one; else as they are."""
    kinds: tuple[Callable[[str], Any], ...] = (int, float)
    for kind in kinds:
        try:
            return [None if v is None else kind(v) for v in values]
        except ValueError:
            continue
    return values


def _parquet(path: Path, wanted: Sequence[str]) -> Columns:
    import pyarrow.parquet as pq  # only here: Parquet is the one format that needs it

    try:
        schema = pq.read_schema(path)
        present = [name for name in dict.fromkeys(wanted) if name in schema.names]
        table = pq.read_table(path, columns=present)
    except Exception as exc:  # pyarrow's errors (ArrowInvalid, OSError) carry its own wording
        raise DataError(f"cannot read {path} as parquet: {exc}") from exc
    values = {name: table.column(name).to_pylist() for name in present}
    return Columns(values, list(schema.names), _class_names(schema.metadata or {}))


def _class_names(metadata: dict[bytes, bytes]) -> dict[str, list[str]]:
    """ClassLabel names that Hugging Face ``datasets`` stores in a Parquet file's metadata."""
    try:
        features = json.loads(metadata.get(b"huggingface", b"{}")).get("info", {}).get("features", {})
    except (json.JSONDecodeError, AttributeError):
        return {}
    return {
        name: list(feature["names"])
        for name, feature in features.items()
        if isinstance(feature, dict) and feature.get("_type") == "ClassLabel" and "names" in feature
    }
