"""Rows waiting for a batch: a bounded queue split into length buckets (no threads, no locks).

A call's rows enter the bucket of their length; `take` builds a batch seeded with the
oldest row and topped up from the nearest buckets of its lane (the graph its rows need: rows
of two lanes never share a batch) while padding stays under
`MAX_PADDING_RATIO` and the batch under `max_batch_size` rows and `max_batch_tokens`
padded tokens, so each batch pads only to its own longest row. A dropped call's rows stay
where they are and are skipped when reached; its slots are freed at once. The caller
(`Batcher`) serialises every method with its lock.

A paced job (a call's attribution rows: hundreds of rows for one call) holds at most its
`window` of queue places at a time: the rest wait in the job and enter, stamped with the time
they enter, as its queued rows leave for batches. Rows of other calls that arrived meanwhile
are older and go first, so a large call shares the model batch by batch instead of making
everyone behind it wait (or be refused for a full queue); a call alone still keeps every
batcher thread busy, since its window is refilled as each batch is taken.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

from attnserve.service.engine.limits import BatchLimits
from attnserve.service.engine.metrics import ModelMetrics

MAX_PADDING_RATIO = 0.5
_BUCKET_BASE = math.sqrt(2)  # neighbouring bucket lengths differ by at most ~41%


def bucket_of(length: int) -> int:
    return 0 if length <= 1 else math.ceil(math.log(length, _BUCKET_BASE) - 1e-9)


def bucket_limit(bucket: int) -> int:
    """The longest length that falls in `bucket`."""
    return math.floor(_BUCKET_BASE**bucket + 1e-9)


class Job:
    """One call's rows: queued, running, then finished with the outputs of its batches."""

    __slots__ = (
        "deadline",
        "dropped",
        "enqueued",
        "future",
        "lane",
        "parts",
        "payload",
        "pending",
        "places",
        "predicted",
        "queue_seconds",
        "ran_until",
        "run_seconds",
        "size",
        "undispatched",
        "unfinished",
        "window",
    )  # fmt: skip

    def __init__(
        self,
        payload: Any,
        size: int,
        deadline: float | None,
        future: asyncio.Future[None],
        lane: int = 0,
        window: int = 0,
        predicted: float = math.inf,
        enqueued: float | None = None,
    ) -> None:
        self.payload = payload  # the runner's: what the rows hold
        self.lane = lane  # the graph its rows need: rows of two lanes never share a batch
        self.size = size
        self.deadline = deadline  # time.monotonic() value
        self.enqueued = time.monotonic() if enqueued is None else enqueued  # when it was submitted
        self.future = future
        self.undispatched = 0  # rows queued and not yet in a batch (add counts them in)
        self.unfinished = size
        self.parts: list[tuple[Any, int, int]] = []  # (batch output, position in batch, row index)
        self.dropped = False
        self.queue_seconds = 0.0  # the longest wait of its rows before their batch started
        self.run_seconds = 0.0  # the longest batch that carried its rows
        self.ran_until = 0.0  # time.monotonic() when the last batch that carried its rows ended
        self.window = window  # most rows queued at once (0: all of them: not paced)
        self.places = min(size, window) if window else size  # queue places it takes when submitted
        self.pending: deque[tuple[int, int]] = deque()  # (row index, length) not queued yet
        # Seconds a one-text job's batch is predicted to run (inf: several texts, or no cost
        # model): predicted once when submitted, compared with the run by the lone policy.
        self.predicted = predicted


class Row:
    __slots__ = ("at", "index", "job", "length")

    def __init__(self, job: Job, index: int, length: int, at: float) -> None:
        self.job, self.index, self.length = job, index, length
        self.at = at  # when it entered the queue (a paced job's rows enter over time)


class Batch:
    __slots__ = ("lane", "real", "rows", "tokens", "width")

    def __init__(self, rows: list[Row], width: int, real: int, lane: int = 0) -> None:
        self.lane = lane  # every row's job's lane
        self.rows = rows
        self.width = width  # the longest row: what the batch is padded to
        self.real = real  # tokens that are not padding
        self.tokens = len(rows) * width  # padded tokens


def lone_batch(
    payload: Any, length: int, deadline: float | None, future: asyncio.Future[None], lane: int,
    predicted: float, at: float,
) -> Batch:  # fmt: skip
    """A lone call's one-text job as a batch of its own: it never enters the queue (the
    batcher runs it on the loop, lone.py). The job is its one row's."""
    job = Job(payload, 1, deadline, future, lane, predicted=predicted, enqueued=at)
    return Batch([Row(job, 0, length, at)], length, length, lane)


class RowQueue:
    def __init__(self, limits: BatchLimits, metrics: ModelMetrics) -> None:
        self.limits = limits
        self.metrics = metrics
        self.queued = 0
        self._buckets: dict[tuple[int, int], deque[Row]] = {}  # by (lane, length bucket)
        self._paced: list[Job] = []  # jobs with rows still pending, oldest first

    def add(self, job: Job, lengths: Sequence[int]) -> int:
        """Queue `job`'s rows (a paced job's first window of them); returns how many entered."""
        places = job.places
        self._enter(job, enumerate(lengths[:places]), job.enqueued)
        if places < len(lengths):
            job.pending.extend((index, lengths[index]) for index in range(places, len(lengths)))
            self._paced.append(job)
        return places

    def _enter(self, job: Job, rows: Iterable[tuple[int, int]], at: float) -> int:
        buckets = self._buckets
        count = 0
        for index, length in rows:
            key = (job.lane, bucket_of(length))
            bucket = buckets.get(key)
            if bucket is None:
                bucket = buckets[key] = deque()
            bucket.append(Row(job, index, length, at))
            count += 1
        self.queued += count
        job.undispatched += count
        return count

    def _refill(self, now: float) -> int:
        """Top paced jobs back up to their window as their rows leave; returns rows added."""
        added = 0
        for job in list(self._paced):
            if not job.dropped:
                room = job.window - job.undispatched
                take = min(room, len(job.pending))
                if take > 0:
                    added += self._enter(job, (job.pending.popleft() for _ in range(take)), now)
            if job.dropped or not job.pending:
                self._paced.remove(job)
        return added

    def drop(self, job: Job, *, expired: bool) -> int:
        """Mark `job` dropped (its queued rows are skipped when reached); the slots freed."""
        if job.dropped:
            return 0
        job.dropped = True
        job.pending.clear()
        freed, job.undispatched = job.undispatched, 0
        self.queued -= freed
        if expired and freed:
            self.metrics.deadline_dropped.inc(freed)
        return freed

    def next_due(self, now: float, hold: float = 0.0) -> tuple[deque[Row] | None, float]:
        """The bucket of the oldest live row and how long until it is due (<= 0: now): after
        `max_delay_s`, or `hold` if longer, unless its batch is full."""
        bucket = self._oldest()
        if bucket is None:
            return None, math.inf
        wait = bucket[0].at + max(self.limits.max_delay_s, hold) - now
        return bucket, 0.0 if wait > 0 and self._full(bucket) else wait

    def _full(self, bucket: deque[Row]) -> bool:
        if len(bucket) >= self.limits.max_batch_size:
            return True
        return len(bucket) * bucket_limit(bucket_of(bucket[0].length)) >= self.limits.max_batch_tokens

    def _oldest(self) -> deque[Row] | None:
        """The bucket whose first live row is the oldest (dropped rows are discarded)."""
        best: deque[Row] | None = None
        for key in list(self._buckets):
            bucket = self._buckets[key]
            while bucket and bucket[0].job.dropped:
                bucket.popleft()
            if not bucket:
                del self._buckets[key]
            elif best is None or bucket[0].at < best[0].at:
                best = bucket
        return best

    def take(self, seed: deque[Row], now: float, expired: list[Job]) -> Batch:
        """Pop the rows of the next batch: the seed bucket first, then its neighbours."""
        limits = self.limits
        rows: list[Row] = []
        longest = real = 0
        lane, seed_key = seed[0].job.lane, bucket_of(seed[0].length)
        keys = sorted(
            (key for key in self._buckets if key[0] == lane), key=lambda key: (abs(key[1] - seed_key), key)
        )
        freed = 0
        for key in keys:
            bucket = self._buckets[key]
            while bucket and len(rows) < limits.max_batch_size:
                row = bucket[0]
                job = row.job
                if job.dropped:
                    bucket.popleft()
                    continue
                if job.deadline is not None and now >= job.deadline:
                    freed += self.drop(job, expired=True)
                    expired.append(job)
                    bucket.popleft()
                    continue
                new_longest = max(longest, row.length)
                tokens = (len(rows) + 1) * new_longest
                if rows and (
                    tokens > limits.max_batch_tokens or 1.0 - (real + row.length) / tokens > MAX_PADDING_RATIO
                ):
                    break
                bucket.popleft()
                rows.append(row)
                longest, real = new_longest, real + row.length
                job.undispatched -= 1
            if not bucket:
                del self._buckets[key]
            if len(rows) >= limits.max_batch_size:
                break
        self.queued -= len(rows)
        if freed or rows:
            self.metrics.queue_depth.dec(freed + len(rows))
        if self._paced:
            refilled = self._refill(now)
            if refilled:
                self.metrics.queue_depth.inc(refilled)
        return Batch(rows, longest, real, lane)
