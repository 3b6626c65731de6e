"""What a file job starts from: the input table, the model that answers (name and version
resolved by the server, so `latest` moving on mid-job or between runs cannot mix versions),
the output and rejects sinks, and the checkpoint it carries on from (or a new one)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from attnserve.service.client.files import checkpoint
from attnserve.service.client.files.calls import added_columns, with_retries
from attnserve.service.client.files.sinks import LineSink, ParquetSink, Sink
from attnserve.service.client.files.spec import FileJob
from attnserve.service.client.files.tables import FileError, Table, format_of, open_table, pyarrow_modules
from attnserve.service.common.vocabulary import AttentionKind


@dataclass(frozen=True)
class Start:
    table: Table
    sink: Sink
    rejects: LineSink
    checkpoint: checkpoint.Checkpoint
    info: Any  # the model's ModelInfo: the version in it is the one every call asks for
    retries: int  # calls repeated while asking for it
    windows: bool = False  # texts are read as windows (asked, or the server's --long-text)


def _schema(table: Table, added: dict[str, str]) -> Any:
    """Parquet output from Parquet input keeps the input's column types."""
    if table.format != "parquet":
        return None
    pa, pq = pyarrow_modules()
    types = {
        "string": pa.string(),
        "float64": pa.float64(),
        "int64": pa.int64(),
        "list<string>": pa.list_(pa.string()),
        "list<float64>": pa.list_(pa.float64()),
    }
    fields = list(pq.ParquetFile(table.path).schema_arrow)
    return pa.schema(fields + [pa.field(name, types[kind]) for name, kind in added.items()])


def prepare(client: Any, job: FileJob, stop: threading.Event) -> Start:
    table = open_table(job.input, job.input_format, job.text_column)
    out_format = format_of(job.output, job.output_format)
    info, waited = with_retries(lambda: client.model(job.model, job.version), job.retry, stop)
    if job.with_attention and info.attention_kind == AttentionKind.NONE:
        raise FileError(f"model {info.name!r} has no attention to add (leave out --with-attention)")
    cascade = info.family == "cascade"  # its rows say which member answered
    problem_type = info.problem_type  # what the added columns are: service/client/files/calls.py
    # Read as windows: asked, or left to a server whose --long-text is windows.
    windows = (job.long_text or info.limits.long_text) == "windows"
    added = added_columns(info.labels, job.prefix, job.with_attention, cascade, problem_type, windows)
    clash = [name for name in added if name in (table.columns or [])]
    if clash:
        raise FileError(
            f"the input already has column(s) {', '.join(clash)}: pass --prefix, e.g. --prefix pred_"
        )
    columns = (table.columns or []) + list(added)
    shape = checkpoint.Shape(
        model=info.name,
        version=info.version,
        labels=list(info.labels),
        text_column=job.text_column,
        input_format=table.format,
        output_format=out_format,
        prefix=job.prefix,
        with_attention=job.with_attention,
        columns=columns,
        rejects=str(job.rejects_path().resolve()),
        long_text=job.long_text,
    )
    progress = checkpoint.progress_path(job.output)
    if job.resume:
        start = checkpoint.load(progress, job.input, shape)
        positions: tuple[int | None, int | None] = (start.output_position, start.rejects_position)
    else:
        for existing in (progress, job.output):
            if existing.exists() and not job.overwrite:
                raise FileError(f"{existing} exists: pass --resume to carry on or --overwrite to start again")
        start = checkpoint.Checkpoint(str(job.input.resolve()), job.input.stat().st_size, shape, 0, 0, 0, 0)
        positions = (None, None)
    sink: Sink
    if out_format == "parquet":
        sink = ParquetSink(job.output, columns, _schema(table, added), positions[0], list(added))
    else:
        sink = LineSink(job.output, out_format, columns, positions[0])
    rejects = LineSink(job.rejects_path(), "jsonl", [], positions[1])
    return Start(table, sink, rejects, start, info, waited, windows)
