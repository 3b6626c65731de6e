"""Rows out, appended in input order and made durable in steps a resumed run can return to.

`commit()` flushes what was written to disk and returns a position; a run records that
position only after the commit, so a crash between the two leaves extra rows that the
resumed run cuts off (`truncate`), never a hole. CSV and JSONL positions are byte sizes;
Parquet, which cannot be appended to, is written as closed part files (the position is
their count) and assembled into the output file when the run stops, with every column any
row had (rows without one hold null there).
"""

from __future__ import annotations

import csv
import json
import os
import shutil
from pathlib import Path
from typing import Any, Protocol

from attnserve.service.client.files import durable
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
            durable.sync_directory(path.parent)  # the new file's name, not only its bytes
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
    """Closed part files in `<output>.parts/`, assembled into the output at `close`.

    Without a `schema` (input other than Parquet) each part has the columns its rows have,
    and the output every column of every part, `trailing` (the added ones) last."""

    def __init__(
        self, path: Path, columns: list[str], schema: Any, position: int | None, trailing: list[str]
    ) -> None:
        self.path, self.columns, self.schema, self.trailing = path, columns, schema, trailing
        self.parts = path.with_name(path.name + ".parts")
        self._pa, self._pq = pyarrow_modules()
        if position is None:
            shutil.rmtree(self.parts, ignore_errors=True)
            self.parts.mkdir(parents=True)
            durable.sync_directory(self.parts.parent)
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
        if self.schema is not None:
            table = self._pa.Table.from_pylist([{c: row.get(c) for c in self.columns} for row in rows])
            return table.cast(self.schema)
        known = dict.fromkeys(self.columns)
        for row in rows:
            known.update(dict.fromkeys(row))
        return self._pa.Table.from_pylist([{c: row.get(c) for c in known} for row in rows])

    def commit(self) -> int:
        if self._rows:
            part = self.parts / f"part-{self._count:06d}.parquet"
            staging = part.with_suffix(".tmp")
            try:
                self._pq.write_table(self._table(self._rows), staging)
            except (self._pa.ArrowInvalid, self._pa.ArrowTypeError) as exc:
                raise FileError(f"these rows cannot be written as Parquet: {exc}") from None
            with staging.open("rb") as handle:
                os.fsync(handle.fileno())
            durable.replace(staging, part)
            self._count += 1
            self._rows = []
        return self._count

    def _output_schema(self, parts: list[Path]) -> Any:
        if self.schema is not None:
            return self.schema
        if not parts:
            return self._pa.schema([(c, self._pa.string()) for c in self.columns])
        try:
            union = self._pa.unify_schemas(
                [self._pq.read_schema(part) for part in parts], promote_options="permissive"
            )
        except (self._pa.ArrowInvalid, self._pa.ArrowTypeError) as exc:
            raise FileError(f"a column holds values of types Parquet cannot mix: {exc}") from None
        names = [n for n in union.names if n not in self.trailing]
        names += [n for n in self.trailing if n in union.names]
        return self._pa.schema([union.field(n) for n in names])

    def close(self, *, complete: bool) -> None:
        """Assemble the committed parts into the output; drop them once the run is complete."""
        staging = self.path.with_name(self.path.name + ".tmp")
        parts = sorted(self.parts.glob("part-*.parquet"))
        schema = self._output_schema(parts)
        with self._pq.ParquetWriter(staging, schema) as writer:
            for part in parts:  # one part in memory at a time
                table = self._pq.read_table(part)
                for name in schema.names:
                    if name not in table.column_names:  # a column only other parts' rows have
                        table = table.append_column(name, self._pa.nulls(len(table), schema.field(name).type))
                writer.write_table(table.select(schema.names).cast(schema))
            if not parts:
                writer.write_table(schema.empty_table())
        with staging.open("rb") as handle:
            os.fsync(handle.fileno())
        durable.replace(staging, self.path)
        if complete:
            shutil.rmtree(self.parts)
            durable.sync_directory(self.path.parent)
