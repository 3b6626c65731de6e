"""Dynamic batching of rows: calls' rows merged into model batches of similar length.

The batcher knows rows (a length each), calls (a deadline and a future each) and limits;
what a row holds and what a batch produces belong to the runner it is given. Each model
version has one `Batcher` with `max_concurrent_batches` threads of its own. A call's rows enter a
bounded queue (full -> RESOURCE_EXHAUSTED at once) split into length buckets (queue.py).
A batch is taken when it is full (`max_batch_size` rows or `max_batch_tokens` padded
tokens) or when its oldest row has waited `max_delay_s`.

Why threads and not a scheduler task: the event loop only appends rows under a lock and
wakes an idle thread, which runs a lone call at once; the thread takes the batch, runs it
(onnxruntime releases the GIL, so the loop parses and replies meanwhile) and hands every
call the batch finished back with one `call_soon_threadsafe`. No task, executor hop or
timer per batch or per call runs on the loop. Running every batch on the loop itself
saves hand-offs but makes the busiest thread wait for the model, and lost throughput under
load (docs/results/peers.md, "gRPC taken out").

A lone call runs on the loop itself when `LonePolicy` (lone.py) says it comes alone: one
text that `cost` predicts to be quick, no other call in flight, none overlapping of late.
Nothing else could use the loop meanwhile, and the call skips the two thread hand-offs.

Holding under load: with `max_delay_s` 0 a batch runs as soon as a row is there, which
under load means one call a batch (measured: 1.1 texts a batch at 8 callers over gRPC,
where the event loop, not the model, sets the pace), and every batch costs a model run, a
thread hand-off and its bookkeeping again. When rows arrived while the previous batch ran,
calls overlap, so a batch that is not full waits for more rows up to `HOLD_FACTOR` times
that batch's run time (at most `MAX_HOLD_S`). A lone caller never sees a row arrive during
its own batch, so it never waits (docs/results/cost.md).

Deadlines: a call whose deadline has passed, or that was cancelled, is dropped before its
rows reach the model, and its queue slots are freed at once.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from attnserve.service.engine.limits import BatchLimits
from attnserve.service.engine.metrics import ModelMetrics
from attnserve.service.engine.request.handback import (
    deadline_passed,
    expired_error,
    fail,
    hand_back,
    internal_error,
)
from attnserve.service.engine.request.lone import LonePolicy
from attnserve.service.engine.request.queue import Batch, Job, RowQueue, lone_batch
from attnserve.service.errors import UNLOADING_MESSAGE, ResourceExhausted, Unavailable

log = logging.getLogger(__name__)

HOLD_FACTOR = 1.0  # a batch waits at most this many run times of the previous batch for more rows
MAX_HOLD_S = 0.002
RunBatch = Callable[[Batch], Any]  # runs in a batcher thread; its result is each row's `part`


class Batcher:
    """Bounded queue + `max_concurrent_batches` threads that take batches and run them."""

    def __init__(
        self, name: str, runner: RunBatch, limits: BatchLimits, metrics: ModelMetrics, lone_path: bool = False
    ) -> None:
        self.name = name
        self.runner = runner
        self.limits = limits
        self.metrics = metrics
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._queue = RowQueue(limits, metrics)
        self._running = 0
        self._closed = False
        self._stopping = False
        self._threads: list[threading.Thread] = []
        self._idle_waiters: list[asyncio.Future[None]] = []
        self._arrivals = 0  # calls submitted so far (read around each batch)
        self._hold = 0.0  # how long the next batch may wait for more rows (see "Holding under load")
        # Whether a lone call may run on the loop (`lone_path`); a fixed max_delay_s asks every
        # text to wait for company, so it turns the lone path off.
        self._lone = LonePolicy() if lone_path and limits.max_delay_s == 0 else None

    @property
    def lone_path(self) -> bool:
        """Whether a lone call may run on the event loop (then its cost is worth measuring)."""
        return self._lone is not None

    @property
    def queued(self) -> int:
        return self._queue.queued

    @property
    def hold(self) -> float:
        """Seconds the next batch may wait for more rows (0 unless calls overlapped)."""
        return self._hold

    def start(self) -> None:
        if not self._threads:
            self._threads = [
                threading.Thread(target=self._serve, name=f"batcher-{self.name}-{i}", daemon=True)
                for i in range(self.limits.max_concurrent_batches)
            ]
            for thread in self._threads:
                thread.start()

    @property
    def share(self) -> int:
        """Queue places a paced job (a call's attribution rows) holds at most at a time: enough
        to fill every batcher thread's next batch, and at most a quarter of the queue."""
        limits = self.limits
        return max(1, min(limits.max_batch_size * limits.max_concurrent_batches, limits.max_queue // 4))

    async def submit(
        self,
        payload: Any,
        lengths: Sequence[int],
        deadline: float | None,
        lane: int = 0,
        paced: bool = False,
        *,
        predicted: float = math.inf,
        alone: bool = False,
    ) -> Job:
        """Queue one call's rows; returns the job once every row has been through a batch.
        `lane`: the graph its rows need (0 unless the runner has two); lanes never share a batch.
        `paced`: the rows hold at most `share` queue places at a time (queue.py).
        `predicted`: a one-text call's predicted run time (inf: unknown); `alone`: no other call
        was in the server when the engine took this one (both for the lone path, lone.py)."""
        count = len(lengths)
        window = self.share if paced else 0
        places = min(count, window) if window else count  # the queue places it takes now (Job.places)
        future = asyncio.get_running_loop().create_future()
        now = time.monotonic()
        with self._lock:
            if self._closed:
                raise Unavailable(UNLOADING_MESSAGE)
            queued = self._queue.queued
            if queued + places > self.limits.max_queue:
                raise ResourceExhausted(
                    f"the queue of model {self.name!r} is full ({queued} of {self.limits.max_queue} "
                    "texts waiting); retry with backoff"
                )
            self._arrivals += 1
            lone = self._lone
            # A call already past its deadline is queued, where the next take refuses it.
            expired = deadline is not None and now >= deadline
            busy = bool(queued or self._running)  # rows queued or a batch running
            if lone is not None and not expired and lone.decide(now, count, busy, predicted, alone):
                # Nothing is queued or running: the call's one row is its own batch, run here.
                self._running += 1
                batch = lone_batch(payload, lengths[0], deadline, future, lane, predicted, now)
                job = batch.rows[0].job
            else:
                batch = None
                job = Job(payload, count, deadline, future, lane, window, predicted, now)
                entered = self._queue.add(job, lengths)
                self.metrics.queue_depth.inc(entered)  # under the lock: a thread may take the rows at once
                self._work.notify()
        if batch is not None:
            # Run on the loop. Calls of another loop that arrived meanwhile wait for a thread; a
            # batch that raised failed its job's future, which the await below then raises.
            try:
                ran = self._run(batch, self._arrivals) is not None
            finally:
                with self._lock:
                    if self._queue.queued:
                        self._work.notify()
                    idle = bool(self._idle_waiters) and self._idle_now()  # only a drain waits
                if idle:
                    self._wake_idle()
            if ran:
                return job  # done on the loop: its future is left unset
        try:
            await job.future
        except asyncio.CancelledError:
            self._cancel(job, expired=deadline_passed(deadline, time.monotonic()))
            raise
        return job

    def _cancel(self, job: Job, *, expired: bool) -> None:
        with self._lock:
            freed = self._queue.drop(job, expired=expired)
            idle = self._idle_now()
        if freed:
            self.metrics.queue_depth.dec(freed)
        if idle:
            self._wake_idle()

    def _idle_now(self) -> bool:
        return self._queue.queued == 0 and self._running == 0 and bool(self._idle_waiters)

    def _wake_idle(self) -> None:
        with self._lock:
            waiters, self._idle_waiters = self._idle_waiters, []
        for waiter in waiters:
            waiter.get_loop().call_soon_threadsafe(_resolve_idle, waiter)

    # --- batcher threads ----------------------------------------------------------------
    def _serve(self) -> None:
        while True:
            with self._lock:
                batch, expired = self._next()
                stop = batch is None and self._stopping
                if batch is not None:
                    self._running += 1
                arrivals = self._arrivals
            fail(expired, expired_error)
            if batch is not None:
                finished = self._run(batch, arrivals)
                if finished:
                    hand_back(finished)
                del finished
            elif stop:
                return
            # An idle thread must not keep its last batch alive while it waits for the next:
            # through its calls it holds the model's outputs, every layer's attention included.
            del batch, expired
            with self._lock:
                idle = self._idle_now()
            if idle:
                self._wake_idle()

    def _next(self) -> tuple[Batch | None, list[Job]]:
        """Wait (holding the lock) for the next batch, or until calls expired, or the stop."""
        expired: list[Job] = []
        while not self._stopping:
            now = time.monotonic()
            bucket, wait = self._queue.next_due(now, self._hold)
            if bucket is None and expired:
                return None, expired
            if bucket is None or wait > 0:
                self._work.wait(None if bucket is None else wait)
                continue
            batch = self._queue.take(bucket, now, expired)
            if batch.rows:
                return batch, expired
        return None, expired

    def _run(self, batch: Batch, arrivals: int) -> list[Job] | None:
        """Run `batch` (taken when `arrivals` calls had been submitted): the calls it finished
        (None: it failed, and failed its calls)."""
        started = time.monotonic()
        try:
            output = self.runner(batch)
        except Exception:  # a failing batch fails its calls, never the batcher
            log.exception("model %s: batch of %d rows failed", self.name, len(batch.rows))
            with self._lock:
                self._running -= 1
            fail(list({id(row.job): row.job for row in batch.rows}.values()), internal_error)
            return None
        ended = time.monotonic()
        elapsed = ended - started
        finished: list[Job] = []
        waits = []
        with self._lock:  # with several batcher threads, one call's rows may finish in two at once
            # Not running from here on: a caller whose call is handed back next must see the
            # batcher idle (a lone caller would otherwise look like overlapping calls).
            self._running -= 1
            # Before the calls are handed back: a caller's next call must not count as overlap.
            overlapped = self._arrivals != arrivals
            self._hold = min(elapsed * HOLD_FACTOR, MAX_HOLD_S) if overlapped else 0.0
            if self._lone is not None:
                # A one-row batch of a one-text job: its prediction, made when it was submitted.
                one = batch.rows[0].job
                predicted = one.predicted if len(batch.rows) == 1 and one.size == 1 else math.inf
                self._lone.ran(len(batch.rows), elapsed, predicted, overlapped, ended)
            for position, row in enumerate(batch.rows):
                job = row.job
                job.parts.append((output, position, row.index))
                if job.queue_seconds < started - job.enqueued:
                    job.queue_seconds = started - job.enqueued
                if job.run_seconds < elapsed:
                    job.run_seconds = elapsed
                if job.ran_until < ended:
                    job.ran_until = ended
                job.unfinished -= 1
                if job.unfinished == 0:
                    finished.append(job)
                    waits.append(job.queue_seconds)
        observe = self.metrics.queue_wait.observe
        for wait in waits:
            observe(wait)
        return finished

    async def drain(self) -> None:
        """Wait until every queued and running row is done."""
        with self._lock:
            if self._queue.queued == 0 and self._running == 0:
                return
            waiter = asyncio.get_running_loop().create_future()
            self._idle_waiters.append(waiter)
        await waiter

    async def close(self) -> None:
        """Refuse new work, finish what is queued, stop the threads."""
        with self._lock:
            self._closed = True
        await self.drain()
        with self._lock:
            self._stopping = True
            self._work.notify_all()
        threads, self._threads = self._threads, []
        # Idle threads only wake and return: joining them here is quick, and a thread hop
        # would delay what follows the close (a withdrawn model's health turning NOT_SERVING).
        _join(threads)


def _join(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.join()


def _resolve_idle(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
