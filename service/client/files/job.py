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
from typing import Any, TextIO

from attnserve.service.client.files import checkpoint, durable
from attnserve.service.client.files.calls import GiveUp, Outcome, added_values
from attnserve.service.client.files.calls import classify_batch as classify_rows
from attnserve.service.client.files.progress import JobProgress
from attnserve.service.client.files.sinks import ParquetSink
from attnserve.service.client.files.spec import FileJob, JobReport
from attnserve.service.client.files.start import prepare
from attnserve.service.client.files.tables import Record, Row
from attnserve.service.common.vocabulary import AttentionMode

PARQUET_COMMIT_ROWS = 10_000  # a Parquet part file per this many rows (and at every stop)


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


def _reject(index: int, record: Record, reason: str | None) -> Row:
    """A rejects line: the row's index, the line it starts on where the format has lines."""
    entry: Row = {"row": index}
    if record.line is not None:
        entry["line"] = record.line
    entry["reason"] = record.problem or reason
    entry["input"] = record.row if record.raw is None else record.raw
    return entry


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
    begun = prepare(client, job, stop)
    table, sink, rejects, state, info = begun.table, begun.sink, begun.rejects, begun.checkpoint, begun.info
    retries, labels, problem_type, windows = begun.retries, info.labels, info.problem_type, begun.windows
    # More texts than the server takes in one call would be refused as a whole.
    batch_size = max(1, min(job.batch_size, info.limits.max_texts_per_request or job.batch_size))
    text_column, prefix, attention = job.text_column, job.prefix, job.with_attention
    progress_file = checkpoint.progress_path(job.output)
    rows = enumerate(table.rows(state.rows_done), start=state.rows_done)
    batches = iter(lambda: list(itertools.islice(rows, batch_size)), [])
    pending: deque[tuple[list[tuple[int, Record]], Future[Outcome]]] = deque()
    stopped: str | None = None
    uncommitted, exhausted = 0, False
    done, rejected = state.rows_done, state.rejected
    first_done = done

    def commit() -> None:
        nonlocal state, uncommitted
        state = checkpoint.Checkpoint(
            state.input, state.input_bytes, state.shape, done, sink.commit(), rejects.commit(), rejected
        )
        checkpoint.save(progress_file, state)  # after the rows it counts are on disk
        uncommitted = 0

    commit()  # a new output's header counts as done: a resumed run keeps it

    mode = (AttentionMode.POOLED if attention else AttentionMode.NONE).word
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
                texts = [None if r.problem else r.row.get(text_column) for _, r in batch]
                future = pool.submit(  # the version resolved at the start: `latest` may move on
                    classify_rows, client, texts, model=info.name, version=info.version,
                    attention=mode, retry=job.retry, stop=stop, long_text=job.long_text,
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
            written: list[Row] = []
            refused: list[Row] = []
            for (index, record), result, reason in zip(batch, outcome.results, outcome.reasons, strict=True):
                if result is None:
                    refused.append(_reject(index, record, reason))
                else:
                    added = added_values(result, labels, prefix, attention, problem_type, windows)
                    written.append({**record.row, **added})
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
            if job.stop_after is not None and done - first_done >= job.stop_after:
                stop.set()
    commit()
    complete = stopped is None and exhausted and not pending
    sink.close(complete=complete)
    rejects.close(complete=complete)
    if complete:
        progress_file.unlink()
        if rejected == 0:
            job.rejects_path().unlink(missing_ok=True)
        durable.sync_directory(progress_file.parent)
    elif stopped is None:
        stopped = "stopped"
    return JobReport(done, rejected, retries, table.total, stopped, time.monotonic() - started)
