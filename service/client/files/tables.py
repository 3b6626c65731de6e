"""Rows in from CSV, JSONL and Parquet files, streamed: CSV and JSONL a row at a time,
Parquet a record batch at a time through pyarrow (imported only for Parquet; the serving
install lacks it, and the error says which package to add)."""

from __future__ import annotations

import csv
import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMATS = ("csv", "jsonl", "parquet")
_SUFFIXES = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet", ".pq": "parquet"}
_PARQUET_BATCH = 4096
# CSV cells hold long texts; the csv module's 128 KiB default refuses some real files.
csv.field_size_limit(1 << 26)

Row = dict[str, Any]


class FileError(Exception):
    """A file that cannot be read or written as asked; its message says why, in words."""


def format_of(path: Path, given: str | None) -> str:
    if given:
        if given not in FORMATS:
            raise FileError(f"unknown format {given!r}; choose from {', '.join(FORMATS)}")
        return given
    found = _SUFFIXES.get(path.suffix.lower())
    if found is None:
        raise FileError(
            f"cannot tell the format of {path.name} from its suffix; name it .csv, .jsonl or "
            f".parquet, or pass --format"
        )
    return found


def pyarrow_modules() -> tuple[Any, Any]:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise FileError(
            "Parquet files need pyarrow, which this installation lacks: pip install pyarrow"
        ) from None
    return pyarrow, pyarrow.parquet


@dataclass(frozen=True)
class Table:
    """An input file: its format, its columns (None for JSONL: every row has its own) and rows."""

    path: Path
    format: str
    columns: list[str] | None
    total: int | None  # rows, where cheap to know

    def rows(self, skip: int = 0) -> Iterator[Row]:
        """Rows in file order, the first `skip` left out (a resumed run has done them)."""
        return _ROWS[self.format](self.path, skip)


def _csv_rows(path: Path, skip: int) -> Iterator[Row]:
    with path.open(newline="", encoding="utf-8") as handle:
        yield from itertools.islice(csv.DictReader(handle), skip, None)


def _jsonl_objects(path: Path) -> Iterator[Row]:
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise FileError(f"{path.name} line {number} is not JSON: {exc.msg}") from None
            if not isinstance(row, dict):
                raise FileError(f"{path.name} line {number} is not a JSON object")
            yield row


def _jsonl_rows(path: Path, skip: int) -> Iterator[Row]:
    yield from itertools.islice(_jsonl_objects(path), skip, None)


def _parquet_rows(path: Path, skip: int) -> Iterator[Row]:
    _, parquet = pyarrow_modules()
    seen = 0
    for batch in parquet.ParquetFile(path).iter_batches(batch_size=_PARQUET_BATCH):
        start, seen = seen, seen + batch.num_rows
        if seen <= skip:  # a batch a resumed run has done: not decoded
            continue
        yield from batch.slice(max(0, skip - start)).to_pylist()


_ROWS = {"csv": _csv_rows, "jsonl": _jsonl_rows, "parquet": _parquet_rows}


def _count_csv(path: Path) -> int:
    with path.open(newline="", encoding="utf-8") as handle:
        return sum(1 for _ in csv.DictReader(handle))


def _count_jsonl(path: Path) -> int:
    with path.open("rb") as handle:
        return sum(1 for line in handle if line.strip())


def open_table(path: Path, given_format: str | None, text_column: str) -> Table:
    """Check the file and its text column before any call; count its rows."""
    fmt = format_of(path, given_format)
    if not path.is_file():
        raise FileError(f"no input file {path}")
    try:
        columns: list[str] | None
        if fmt == "csv":
            with path.open(newline="", encoding="utf-8") as handle:
                columns = next(csv.reader(handle), None)
            if columns is None:
                return Table(path, fmt, [], 0)  # not even a header: no rows
            total = _count_csv(path)
        elif fmt == "jsonl":
            first = next(_jsonl_objects(path), None)
            columns = None if first is None else list(first)
            total = _count_jsonl(path)
        else:
            _, parquet = pyarrow_modules()
            metadata = parquet.ParquetFile(path)
            columns = list(metadata.schema_arrow.names)
            total = metadata.metadata.num_rows
    except (UnicodeDecodeError, csv.Error) as exc:
        raise FileError(f"{path.name} cannot be read as {fmt}: {exc}") from None
    except OSError as exc:
        raise FileError(f"{path.name} cannot be read as {fmt}: {exc}") from None
    if columns and text_column not in columns:
        raise FileError(
            f"{path.name} has no column {text_column!r} (pass --text-column); its columns: "
            f"{', '.join(columns) or 'none'}"
        )
    return Table(path, fmt, columns, total)
