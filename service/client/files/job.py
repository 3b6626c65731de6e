"""Classify a file: every row of the input once, in input order, with label and probabilities
added and every other column kept; batches of rows over concurrent calls; rejected rows with
their reasons in a rejects file; a progress file so that a stopped run carries on (--resume).

A stop (Ctrl-C, SIGTERM, `stop.set()`) sends no new batch, lets the batches in flight
finish, writes them and returns; a batch the service keeps refusing ends the run the same way.
"""

from __future__ import annotations

import itertools
import signal
import threading
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from attnserve.service.client.files import checkpoint
from attnserve.service.client.files.calls import (
    GiveUp,
    Outcome,
    Retry,
    added_columns,
    added_values,
    with_retries,
)
from attnserve.service.client.files.calls import classify_batch as classify_rows
from attnserve.service.client.files.progress import JobProgress
from attnserve.service.client.files.sinks import LineSink, ParquetSink, Sink
from attnserve.service.client.files.tables import FileError, Row, Table, format_of, open_table

PARQUET_COMMIT_ROWS = 10_000  # a Parquet part file per this many rows (and at every stop)


@dataclass(frozen=True)
class FileJob:
    input: Path
    output: Path
    text_column: str = "text"
    input_format: str | None = None  # None: from the suffix
    output_format: str | None = None
    rejects: Path | None = None  # None: <output>.rejects.jsonl
    model: str = ""
    version: int = 0
    batch_size: int = 64
    workers: int = 4
    with_attention: bool = False  # add the tokens and each one's pooled attention
    prefix: str = ""  # before the added column names
    resume: bool = False
    overwrite: bool = False
    retry: Retry = field(default_factory=Retry)
    progress_every: float = 5.0  # seconds between progress lines off a terminal

    def rejects_path(self) -> Path:
        return self.rejects or self.output.with_name(self.output.name + ".rejects.jsonl")


@dataclass(frozen=True)
class JobReport:
    rows_done: int  # input rows written or rejected, earlier runs included
    rejected: int
    retries: int  # calls repeated while the server was busy or away
    total: int | None
    stopped: str | None  # None: complete; else why it stopped ("SIGINT", "SIGTERM", a refusal)
    seconds: float


@contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[dict[str, str]]:
    """SIGINT and SIGTERM set `stop` (the job then winds down) instead of ending the process."""
    caught: dict[str, str] = {}

    def handler(number: int, frame: Any) -> None:
        caught.setdefault("signal", signal.Signals(number).name)
        stop.set()

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield caught
    finally:
        for number, old in previous.items():
            signal.signal(number, old)


def _schema(table: Table, added: list[str], labels: list[str], job: FileJob) -> Any:
    """Parquet output from Parquet input keeps the input's column types."""
    if table.format != "parquet":
        return None
    from attnserve.service.client.files.tables import pyarrow_modules

    pa, pq = pyarrow_modules()
    fields = list(pq.ParquetFile(table.path).schema_arrow)
    fields += [pa.field(added[0], pa.string())]
    fields += [pa.field(name, pa.float64()) for name in added[1 : 1 + len(labels)]]
    if job.with_attention:
        fields += [pa.field(added[-2], pa.list_(pa.string())), pa.field(added[-1], pa.list_(pa.float64()))]
    return pa.schema(fields)


def _prepare(
    client: Any, job: FileJob, stop: threading.Event
) -> tuple[Table, Sink, LineSink, checkpoint.Checkpoint, Any, int]:
    table = open_table(job.input, job.input_format, job.text_column)
    out_format = format_of(job.output, job.output_format)
    info, waited = with_retries(lambda: client.model(job.model, job.version), job.retry, stop)
    if job.with_attention and info.attention_kind == "none":
        raise FileError(f"model {info.name!r} has no attention to add (leave out --with-attention)")
    added = added_columns(info.labels, job.prefix, job.with_attention)
    clash = [name for name in added if name in (table.columns or [])]
    if clash:
        raise FileError(
            f"the input already has column(s) {', '.join(clash)}: pass --prefix, e.g. --prefix pred_"
        )
    progress = checkpoint.progress_path(job.output)
    if job.resume:
        start = checkpoint.load(progress, job.input, job.text_column)
        positions: tuple[int | None, int | None] = (start.output_position, start.rejects_position)
    else:
        for existing in (progress, job.output):
            if existing.exists() and not job.overwrite:
                raise FileError(f"{existing} exists: pass --resume to carry on or --overwrite to start again")
        start = checkpoint.Checkpoint(
            str(job.input.resolve()), job.input.stat().st_size, job.text_column, 0, 0, 0, 0
        )
        positions = (None, None)
    columns = (table.columns or []) + added
    sink: Sink
    if out_format == "parquet":
        schema = _schema(table, added, info.labels, job)
        sink = ParquetSink(job.output, columns, schema, positions[0])
    else:
        sink = LineSink(job.output, out_format, columns, positions[0])
    rejects = LineSink(job.rejects_path(), "jsonl", [], positions[1])
    return table, sink, rejects, start, info, waited


def classify_file(
    client: Any,
    job: FileJob,
    *,
    stop: threading.Event | None = None,
    stream: TextIO | None = None,
) -> JobReport:
    """Run `job` with `client` (a `Client`); see the module's docstring."""
    stop = stop or threading.Event()
    started = time.monotonic()
    table, sink, rejects, state, info, retries = _prepare(client, job, stop)
    labels = info.labels
    # More texts than the server takes in one call would be refused as a whole.
    batch_size = max(1, min(job.batch_size, info.limits.get("max_texts_per_request") or job.batch_size))
    text_column, prefix, attention = job.text_column, job.prefix, job.with_attention
    progress_file = checkpoint.progress_path(job.output)
    rows = enumerate(table.rows(state.rows_done), start=state.rows_done)
    batches = iter(lambda: list(itertools.islice(rows, batch_size)), [])
    pending: deque[tuple[list[tuple[int, Row]], Future[Outcome]]] = deque()
    stopped: str | None = None
    uncommitted, exhausted = 0, False
    done, rejected = state.rows_done, state.rejected

    def commit() -> None:
        nonlocal state, uncommitted
        state = checkpoint.Checkpoint(
            state.input, state.input_bytes, text_column, done, sink.commit(), rejects.commit(), rejected
        )
        checkpoint.save(progress_file, state)  # after the rows it counts are on disk
        uncommitted = 0

    commit()  # a new output's header counts as done: a resumed run keeps it

    mode = "pooled" if attention else "none"
    with (
        ThreadPoolExecutor(job.workers, thread_name_prefix="classify-file") as pool,
        JobProgress(table.total, done, every=job.progress_every, stream=stream) as progress,
    ):
        while True:
            while not stop.is_set() and stopped is None and len(pending) < job.workers:
                batch = next(batches, None)
                if batch is None:
                    exhausted = True
                    break
                texts = [row.get(text_column) for _, row in batch]
                future = pool.submit(
                    classify_rows, client, texts, model=job.model, version=job.version,
                    attention=mode, retry=job.retry, stop=stop,
                )  # fmt: skip
                pending.append((batch, future))
            if not pending:
                break
            batch, future = pending[0]
            try:
                outcome = future.result(timeout=0.2)  # short: a signal is noticed between waits
            except FutureTimeout:
                continue
            except GiveUp as exc:
                stopped = str(exc)
                stop.set()  # batches after this one are not written: --resume redoes them
                for _, later in pending:
                    later.cancel()
                break
            pending.popleft()
            retries += outcome.retries
            written, refused = [], []
            for (index, row), result, reason in zip(batch, outcome.results, outcome.reasons, strict=True):
                if result is None:
                    refused.append({"row": index, "reason": reason, "input": row})
                else:
                    written.append({**row, **added_values(result, labels, prefix, attention)})
            sink.write(written)
            rejects.write(refused)
            done, rejected, uncommitted = (
                done + len(batch),
                rejected + len(refused),
                uncommitted + len(batch),
            )
            if not isinstance(sink, ParquetSink) or uncommitted >= PARQUET_COMMIT_ROWS:
                commit()
            progress.advance(len(batch), len(refused))
    commit()
    complete = stopped is None and exhausted and not pending
    sink.close(complete=complete)
    rejects.close(complete=complete)
    if complete:
        progress_file.unlink()
        if rejected == 0:
            job.rejects_path().unlink(missing_ok=True)
    elif stopped is None:
        stopped = "stopped"
    return JobReport(done, rejected, retries, table.total, stopped, time.monotonic() - started)
