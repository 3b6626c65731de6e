"""Dynamic batching: texts from many calls merged into model calls of similar length.

Each model version has one `Batcher`. A call's texts enter a bounded queue (full ->
RESOURCE_EXHAUSTED at once) split into length buckets. A batch is flushed when it is full
(`max_batch_size` texts or `max_batch_tokens` padded tokens) or when its oldest text has
waited `max_delay_ms`; it is seeded with the oldest text and topped up from the nearest
buckets while padding stays under `MAX_PADDING_RATIO`, so it pads only to its own longest
text. `session.run` happens in a thread executor (onnxruntime releases the GIL), so the
event loop keeps answering health checks and accepting calls meanwhile.

Deadlines: a text whose call deadline has passed, or whose call was cancelled, is dropped
before it reaches the model and its queue slot is freed at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from attnserve.service.engine.attention import AttentionMode
from attnserve.service.engine.metrics import ModelMetrics
from attnserve.service.engine.tokenization import EncodedTexts
from attnserve.service.errors import (
    INTERNAL_MESSAGE,
    DeadlineExceeded,
    Internal,
    ResourceExhausted,
    Unavailable,
)

log = logging.getLogger(__name__)

MAX_PADDING_RATIO = 0.5
_NO_ARRAY = np.empty(0, np.float32)  # placeholder until a text's output arrives
_NO_INDEX = np.empty(0, np.int64)
_BUCKET_BASE = math.sqrt(2)  # neighbouring bucket lengths differ by at most ~41%


def bucket_of(length: int) -> int:
    return 0 if length <= 1 else math.ceil(math.log(length, _BUCKET_BASE) - 1e-9)


def bucket_limit(bucket: int) -> int:
    """The longest length that falls in `bucket`."""
    return math.floor(_BUCKET_BASE**bucket + 1e-9)


@dataclass(slots=True)
class Prediction:
    """Outputs for one call's texts, in request order."""

    logits: np.ndarray  # [k, C] float32
    probabilities: np.ndarray  # [k, C] float32
    attention: list[np.ndarray] | None  # per text, in the requested mode, padding stripped
    top_tokens: list[tuple[np.ndarray, np.ndarray]] | None  # per text: (indices, weights)
    queue_seconds: float = 0.0
    inference_seconds: float = 0.0


@dataclass(slots=True, eq=False)
class Job:
    """One call's texts waiting for, or going through, the model."""

    encoded: EncodedTexts
    mode: AttentionMode
    top_k: int
    deadline: float | None  # time.monotonic() value
    future: asyncio.Future[Prediction]
    enqueued: float
    prediction: Prediction
    undispatched: int
    unfinished: int
    dropped: bool = False

    @property
    def wants_attention(self) -> bool:
        return self.mode != AttentionMode.NONE or self.top_k > 0


@dataclass(slots=True, eq=False)
class Row:
    job: Job
    index: int
    length: int


@dataclass(slots=True)
class RowOutput:
    logits: np.ndarray  # [C]
    probabilities: np.ndarray  # [C]
    attention: np.ndarray | None
    top: tuple[np.ndarray, np.ndarray] | None


BatchRunner = Callable[[list[Row]], list[RowOutput]]


@dataclass
class BatchLimits:
    max_batch_size: int
    max_batch_tokens: int
    max_delay_s: float
    max_queue: int
    max_concurrent: int


@dataclass(eq=False)
class Batcher:
    """Queue + scheduler for one model version; `run_batch` executes in a worker thread."""

    name: str
    run_batch: BatchRunner
    limits: BatchLimits
    metrics: ModelMetrics
    num_classes: int
    _buckets: dict[int, deque[Row]] = field(default_factory=dict, init=False)
    _queued: int = field(default=0, init=False)
    _running: int = field(default=0, init=False)
    _closed: bool = field(default=False, init=False)
    _wakeup: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    _idle: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    _task: asyncio.Task[None] | None = field(default=None, init=False)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set, init=False)
    _executor: ThreadPoolExecutor = field(init=False)

    def __post_init__(self) -> None:
        self._executor = ThreadPoolExecutor(
            self.limits.max_concurrent, thread_name_prefix=f"infer-{self.name}"
        )
        self._idle.set()

    @property
    def queued(self) -> int:
        return self._queued

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._schedule(), name=f"batcher-{self.name}")

    async def submit(
        self, encoded: EncodedTexts, mode: AttentionMode, top_k: int, deadline: float | None
    ) -> Prediction:
        """Queue a call's texts and wait for their outputs."""
        count = len(encoded)
        if self._closed:
            raise Unavailable("the model version is being unloaded; retry")
        if self._queued + count > self.limits.max_queue:
            raise ResourceExhausted(
                f"the queue of model {self.name!r} is full ({self._queued} of {self.limits.max_queue} texts "
                "waiting); retry with backoff"
            )
        loop = asyncio.get_running_loop()
        job = Job(
            encoded=encoded,
            mode=mode,
            top_k=top_k,
            deadline=deadline,
            future=loop.create_future(),
            enqueued=time.monotonic(),
            prediction=Prediction(
                logits=np.empty((count, self.num_classes), np.float32),
                probabilities=np.empty((count, self.num_classes), np.float32),
                attention=[_NO_ARRAY] * count if mode != AttentionMode.NONE else None,
                top_tokens=[(_NO_INDEX, _NO_ARRAY)] * count if top_k else None,
            ),
            undispatched=count,
            unfinished=count,
        )
        buckets = self._buckets
        for index, length in enumerate(encoded.lengths):
            key = bucket_of(length)
            bucket = buckets.get(key)
            if bucket is None:
                bucket = buckets[key] = deque()
            bucket.append(Row(job, index, length))
        self._queued += count
        self.metrics.queue_depth.inc(count)
        self._idle.clear()
        self._wakeup.set()
        try:
            return await job.future
        except asyncio.CancelledError:
            self._drop(job, expired=deadline is not None and time.monotonic() >= deadline)
            raise

    def _drop(self, job: Job, *, expired: bool) -> None:
        """Free a job's undispatched slots (its rows are skipped when reached)."""
        if job.dropped:
            return
        job.dropped = True
        if job.undispatched:
            self._queued -= job.undispatched
            self.metrics.queue_depth.dec(job.undispatched)
            if expired:
                self.metrics.deadline_dropped.inc(job.undispatched)
            job.undispatched = 0
        if not job.future.done():
            job.future.set_exception(DeadlineExceeded("the deadline passed while the texts were queued"))
            job.future.exception()  # mark retrieved: the caller may be gone
        self._check_idle()

    def _check_idle(self) -> None:
        if self._queued == 0 and self._running == 0:
            self._idle.set()

    def _oldest(self) -> deque[Row] | None:
        """The bucket whose first live row is the oldest (dropped rows are discarded)."""
        best: deque[Row] | None = None
        for key in list(self._buckets):
            bucket = self._buckets[key]
            while bucket and bucket[0].job.dropped:
                bucket.popleft()
            if not bucket:
                del self._buckets[key]
            elif best is None or bucket[0].job.enqueued < best[0].job.enqueued:
                best = bucket
        return best

    def _ready(self, bucket: deque[Row], now: float) -> bool:
        head = bucket[0]
        if now - head.job.enqueued >= self.limits.max_delay_s or len(bucket) >= self.limits.max_batch_size:
            return True
        return len(bucket) * bucket_limit(bucket_of(head.length)) >= self.limits.max_batch_tokens

    def _take(self, seed: deque[Row], now: float) -> list[Row]:
        """Pop the rows of the next batch: the seed bucket first, then its neighbours."""
        limits = self.limits
        rows: list[Row] = []
        longest = real = 0
        seed_key = bucket_of(seed[0].length)
        keys = sorted(self._buckets, key=lambda key: (abs(key - seed_key), key))
        for key in keys:
            bucket = self._buckets[key]
            while bucket and len(rows) < limits.max_batch_size:
                row = bucket[0]
                if row.job.dropped:
                    bucket.popleft()
                    continue
                job = row.job
                if job.deadline is not None and now >= job.deadline:
                    self._drop(job, expired=True)
                    bucket.popleft()
                    continue
                new_longest = max(longest, row.length)
                tokens = (len(rows) + 1) * new_longest
                padding = 1.0 - (real + row.length) / tokens
                if rows and (tokens > limits.max_batch_tokens or padding > MAX_PADDING_RATIO):
                    break
                bucket.popleft()
                rows.append(row)
                longest, real = new_longest, real + row.length
                job.undispatched -= 1
            if not bucket:
                del self._buckets[key]
            if len(rows) >= limits.max_batch_size:
                break
        if rows:
            self._queued -= len(rows)
            self.metrics.queue_depth.dec(len(rows))
        return rows

    async def _schedule(self) -> None:
        loop = asyncio.get_running_loop()
        timer: asyncio.TimerHandle | None = None
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            if timer is not None:
                timer.cancel()
                timer = None
            while self._running < self.limits.max_concurrent:
                now = time.monotonic()
                bucket = self._oldest()
                if bucket is None:
                    self._check_idle()
                    break
                if not self._ready(bucket, now):
                    delay = bucket[0].job.enqueued + self.limits.max_delay_s - now
                    timer = loop.call_later(delay, self._wakeup.set)
                    break
                rows = self._take(bucket, now)
                if rows:
                    self._running += 1
                    task = loop.create_task(self._execute(rows, now))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)

    async def _execute(self, rows: list[Row], dispatched: float) -> None:
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        try:
            outputs = await loop.run_in_executor(self._executor, self.run_batch, rows)
        except Exception:  # a failing batch fails its calls, never the scheduler
            log.exception("model %s: batch of %d texts failed", self.name, len(rows))
            for row in rows:
                if not row.job.future.done():
                    row.job.future.set_exception(Internal(INTERNAL_MESSAGE))
        else:
            elapsed = time.monotonic() - started
            for row, output in zip(rows, outputs, strict=True):
                self._deliver(row, output, dispatched, elapsed)
        finally:
            self._running -= 1
            self._check_idle()
            self._wakeup.set()

    def _deliver(self, row: Row, output: RowOutput, dispatched: float, elapsed: float) -> None:
        job = row.job
        prediction = job.prediction
        prediction.logits[row.index] = output.logits
        prediction.probabilities[row.index] = output.probabilities
        if prediction.attention is not None and output.attention is not None:
            prediction.attention[row.index] = output.attention
        if prediction.top_tokens is not None and output.top is not None:
            prediction.top_tokens[row.index] = output.top
        prediction.queue_seconds = max(prediction.queue_seconds, dispatched - job.enqueued)
        prediction.inference_seconds = max(prediction.inference_seconds, elapsed)
        job.unfinished -= 1
        if job.unfinished == 0 and not job.future.done():
            self.metrics.queue_wait.observe(prediction.queue_seconds)
            job.future.set_result(prediction)

    async def drain(self) -> None:
        """Wait until every queued and running text is done."""
        await self._idle.wait()

    async def close(self) -> None:
        """Refuse new work, finish what is queued, stop the scheduler and the thread."""
        self._closed = True
        await self.drain()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._executor.shutdown(wait=True)
