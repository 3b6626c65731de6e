"""Rows in from CSV, JSONL and Parquet files, streamed: CSV and JSONL a row at a time,
Parquet a record batch at a time through pyarrow (imported only for Parquet; the serving
install lacks it, and the error says which package to add). A row that cannot be read (a
JSONL line that is not a JSON object, bytes that are not UTF-8) comes with the reason, for
the job to reject it and go on."""

from __future__ import annotations

import csv
import itertools
import json
import re
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
class Record:
    """One input row: its values, the line it starts on (CSV, JSONL; None for Parquet) and,
    for a row that cannot be read, why, with what could be read of it (`row` for CSV, the
    line's text in `raw` for JSONL; bytes that are not UTF-8 written as \\xNN)."""

    row: Row
    line: int | None = None
    problem: str | None = None
    raw: str | None = None


@dataclass(frozen=True)
class Table:
    """An input file: its format, its columns (None for JSONL: every row has its own) and rows."""

    path: Path
    format: str
    columns: list[str] | None
    total: int | None  # rows, where cheap to know

    def rows(self, skip: int = 0) -> Iterator[Record]:
        """Rows in file order, the first `skip` left out (a resumed run has done them)."""
        return _ROWS[self.format](self.path, skip)


def _shown(text: str) -> str:
    """Text read with surrogateescape, its bytes that are not UTF-8 written as \\xNN."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _not_utf8(values: Row) -> str | None:
    for key, value in values.items():
        if isinstance(value, str) and value != _shown(value):
            return f"bytes that are not UTF-8 in column {_shown(str(key))!r}"
    return None


def _csv_rows(path: Path, skip: int) -> Iterator[Record]:
    # surrogateescape: a byte that is not UTF-8 spoils its row only, not the rest of the file.
    with path.open(newline="", encoding="utf-8", errors="surrogateescape") as handle:
        reader = csv.DictReader(handle)
        _ = reader.fieldnames  # reads the header
        start = reader.line_num + 1
        for number, row in enumerate(reader):
            line, start = start, reader.line_num + 1
            if number < skip:
                continue
            problem = _not_utf8(row)
            if problem is not None:
                row = {_shown(str(k)): _shown(v) if isinstance(v, str) else v for k, v in row.items()}
            yield Record(row, line, problem)


# A \uD800-\uDFFF escape: valid JSON, but alone it is no character and cannot be written out.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _encodable(row: Row) -> bool:
    try:
        json.dumps(row, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _jsonl_records(path: Path) -> Iterator[Record]:
    """Every line that is not blank, as a row or as the reason it is not one."""
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                problem = f"bytes that are not UTF-8 (0x{raw[exc.start]:02x} at byte {exc.start + 1})"
                shown = raw.decode("utf-8", "backslashreplace").rstrip("\r\n")
                yield Record({}, number, problem, shown)
                continue
            try:
                row = json.loads(text)
            except json.JSONDecodeError as exc:
                problem = f"not JSON: {exc.msg} (column {exc.colno})"
                yield Record({}, number, problem, text.rstrip("\r\n"))
                continue
            if not isinstance(row, dict):
                yield Record({}, number, "not a JSON object", text.rstrip("\r\n"))
                continue
            if _SURROGATE_ESCAPE.search(text) and not _encodable(row):
                problem = "a \\u escape of half a surrogate pair, which UTF-8 cannot hold"
                yield Record({}, number, problem, text.rstrip("\r\n"))
                continue
            yield Record(row, number)


def _jsonl_rows(path: Path, skip: int) -> Iterator[Record]:
    yield from itertools.islice(_jsonl_records(path), skip, None)


def _parquet_rows(path: Path, skip: int) -> Iterator[Record]:
    _, parquet = pyarrow_modules()
    seen = 0
    for batch in parquet.ParquetFile(path).iter_batches(batch_size=_PARQUET_BATCH):
        start, seen = seen, seen + batch.num_rows
        if seen <= skip:  # a batch a resumed run has done: not decoded
            continue
        yield from (Record(row) for row in batch.slice(max(0, skip - start)).to_pylist())


_ROWS = {"csv": _csv_rows, "jsonl": _jsonl_rows, "parquet": _parquet_rows}


def _count_csv(path: Path) -> int:
    with path.open(newline="", encoding="utf-8", errors="surrogateescape") as handle:
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
            with path.open(newline="", encoding="utf-8", errors="surrogateescape") as handle:
                columns = next(csv.reader(handle), None)
            if columns is None:
                return Table(path, fmt, [], 0)  # not even a header: no rows
            if any(name != _shown(name) for name in columns):
                raise FileError(f"{path.name}: its header has bytes that are not UTF-8")
            total = _count_csv(path)
        elif fmt == "jsonl":
            first = next((r.row for r in _jsonl_records(path) if r.problem is None), None)
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
