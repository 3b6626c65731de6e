"""Rows out, appended in input order and made durable in steps a resumed run can return to.

`commit()` flushes what was written to disk and returns a position; a run records that
position only after the commit, so a crash between the two leaves extra rows that the
resumed run cuts off (`truncate`), never a hole. CSV and JSONL positions are byte sizes;
Parquet, which cannot be appended to, is written as closed part files (the position is
their count) and assembled into the output file when the run stops.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
from pathlib import Path
from typing import Any, Protocol

from attnserve.service.client.files.tables import FileError, Row, pyarrow_modules


class Sink(Protocol):
    def write(self, rows: list[Row]) -> None: ...
    def commit(self) -> int: ...
    def close(self, *, complete: bool) -> None: ...


def _cell(value: Any) -> Any:
    """CSV holds text: lists and objects (tokens, attention, nested input) as JSON."""
    return json.dumps(value, default=str) if isinstance(value, list | dict) else value


class LineSink:
    """CSV (with a header) or JSONL, appended; `position` is where a resumed run cuts it."""

    def __init__(self, path: Path, fmt: str, columns: list[str], position: int | None) -> None:
        self.path, self.format, self.columns = path, fmt, columns
        if position is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = path.open("w", newline="", encoding="utf-8")
            if fmt == "csv":
                csv.writer(self._handle).writerow(columns)
        else:
            if not path.is_file() or path.stat().st_size < position:
                raise FileError(
                    f"{path} is shorter than its progress file says: start again with --overwrite"
                )
            os.truncate(path, position)
            self._handle = path.open("a", newline="", encoding="utf-8")
        self._csv = csv.DictWriter(self._handle, fieldnames=columns, restval="", extrasaction="ignore")

    def write(self, rows: list[Row]) -> None:
        if self.format == "csv":
            self._csv.writerows({key: _cell(value) for key, value in row.items()} for row in rows)
        else:
            self._handle.writelines(json.dumps(row, ensure_ascii=False, default=str) + "\n" for row in rows)

    def commit(self) -> int:
        self._handle.flush()
        os.fsync(self._handle.fileno())
        return os.fstat(self._handle.fileno()).st_size

    def close(self, *, complete: bool) -> None:
        """Close the file (commit first: what is not committed may be cut by a resumed run)."""
        self._handle.close()


class ParquetSink:
    """Closed part files in `<output>.parts/`, assembled into the output at `close`."""

    def __init__(self, path: Path, columns: list[str], schema: Any, position: int | None) -> None:
        self.path, self.columns, self.schema = path, columns, schema
        self.parts = path.with_name(path.name + ".parts")
        self._pa, self._pq = pyarrow_modules()
        if position is None:
            shutil.rmtree(self.parts, ignore_errors=True)
            self.parts.mkdir(parents=True)
        if position is not None and len(list(self.parts.glob("part-*.parquet"))) < position:
            raise FileError(
                f"{self.parts} lacks parts its progress file counts: start again with --overwrite"
            )
        for part in sorted(self.parts.glob("part-*.parquet"))[position or 0 :]:
            part.unlink()  # written after the last recorded commit
        self._count = len(list(self.parts.glob("part-*.parquet")))
        self._rows: list[Row] = []

    def write(self, rows: list[Row]) -> None:
        self._rows.extend(rows)

    def _table(self, rows: list[Row]) -> Any:
        table = self._pa.Table.from_pylist([{c: row.get(c) for c in self.columns} for row in rows])
        if self.schema is None:
            self.schema = table.schema
        return table.cast(self.schema)

    def commit(self) -> int:
        if self._rows:
            part = self.parts / f"part-{self._count:06d}.parquet"
            staging = part.with_suffix(".tmp")
            self._pq.write_table(self._table(self._rows), staging)
            with staging.open("rb") as handle:
                os.fsync(handle.fileno())
            staging.rename(part)
            self._count += 1
            self._rows = []
        return self._count

    def close(self, *, complete: bool) -> None:
        """Assemble the committed parts into the output; drop them once the run is complete."""
        staging = self.path.with_name(self.path.name + ".tmp")
        parts = sorted(self.parts.glob("part-*.parquet"))
        schema = self.schema
        if schema is None:
            schema = self._pa.schema([(c, self._pa.string()) for c in self.columns])
        with self._pq.ParquetWriter(staging, schema) as writer:
            for part in parts:  # one part in memory at a time
                writer.write_table(self._pq.read_table(part).cast(schema))
            if not parts:
                writer.write_table(schema.empty_table())
        staging.replace(self.path)
        if complete:
            shutil.rmtree(self.parts)
