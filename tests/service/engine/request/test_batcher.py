"""The batcher alone, driven with a fake runner: no server, no model.

The fake runner records every batch it is given (which call's rows, in which order) and
can be held on a gate, so the tests see exactly what reaches the model and when.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from attnserve.service.engine.limits import BatchLimits
from attnserve.service.engine.metrics import Metrics, ModelMetrics
from attnserve.service.engine.request.batcher import MAX_HOLD_S, Batcher
from attnserve.service.engine.request.queue import Batch, Job
from attnserve.service.errors import DeadlineExceeded, Internal, ResourceExhausted, Unavailable
from tests.support.waits import until


class FakeRunner:
    """Returns, per batch, the list of (payload, row index, length) it ran.

    It counts the batches inside it at once (`most_inside`); with `meet` set, each batch
    waits there until that many are inside together, so a test of concurrency does not
    depend on how the threads happen to be scheduled."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[Any, int, int]]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.fail_on: Any = None
        self.meet: threading.Barrier | None = None
        self.inside = 0
        self.most_inside = 0
        self._count = threading.Lock()

    def __call__(self, batch: Batch) -> list[tuple[Any, int, int]]:
        with self._count:
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
        try:
            self.entered.set()
            if self.meet is not None:
                with contextlib.suppress(threading.BrokenBarrierError):  # alone: most_inside says so
                    self.meet.wait()
            assert self.gate.wait(10), "the test never opened the gate"
            ran = [(row.job.payload, row.index, row.length) for row in batch.rows]
            self.batches.append(ran)
            if self.fail_on is not None and any(payload == self.fail_on for payload, _, _ in ran):
                raise RuntimeError("the model failed")
            return ran
        finally:
            with self._count:
                self.inside -= 1

    def payloads(self) -> list[Any]:
        return [payload for batch in self.batches for payload, _, _ in batch]


def limits(**overrides: Any) -> BatchLimits:
    values = {"max_batch_size": 32, "max_batch_tokens": 4096, "max_delay_s": 0.0, "max_queue": 1024,
              "max_concurrent_batches": 1}  # fmt: skip
    return BatchLimits(**{**values, **overrides})


def model_metrics() -> ModelMetrics:
    return Metrics(CollectorRegistry()).bind_model("m", 1, "test", "CPUExecutionProvider")


@pytest.fixture
def runner() -> Iterator[FakeRunner]:
    fake = FakeRunner()
    yield fake
    fake.gate.set()


def outputs_by_index(job: Job) -> dict[int, tuple[Any, int, int]]:
    """Row index -> what the runner ran at that row's position in its batch."""
    return {index: output[position] for output, position, index in job.parts}


async def started(batcher: Batcher) -> Batcher:
    batcher.start()
    return batcher


def test_every_row_gets_its_own_output_back_in_request_order(runner: FakeRunner) -> None:
    async def run() -> Job:
        batcher = await started(Batcher("m", runner, limits(max_batch_size=3), model_metrics()))
        try:
            return await batcher.submit("call", [5, 9, 5, 7, 6, 8, 5], None)
        finally:
            await batcher.close()

    job = asyncio.run(run())
    got = outputs_by_index(job)
    assert sorted(got) == list(range(7))
    assert [got[i][2] for i in range(7)] == [5, 9, 5, 7, 6, 8, 5]
    assert all(got[i][1] == i for i in range(7)), "a row's output must be the one computed for that row"
    assert all(len(batch) <= 3 for batch in runner.batches), "max_batch_size caps a batch"


def test_rows_of_very_different_lengths_go_to_different_batches(runner: FakeRunner) -> None:
    async def run() -> None:
        batcher = Batcher("m", runner, limits(max_delay_s=0.2), model_metrics())
        batcher.start()
        short = asyncio.ensure_future(batcher.submit("short", [4, 4, 4], None))
        long = asyncio.ensure_future(batcher.submit("long", [40, 40], None))
        await asyncio.gather(short, long)
        await batcher.close()

    asyncio.run(run())
    assert {frozenset(p for p, _, _ in batch) for batch in runner.batches} == {
        frozenset({"short"}),
        frozenset({"long"}),
    }, "padding 4-token rows to 40 would waste most of the batch"


def test_the_token_cap_limits_rows_times_longest(runner: FakeRunner) -> None:
    async def run() -> None:
        batcher = await started(Batcher("m", runner, limits(max_batch_tokens=64), model_metrics()))
        await batcher.submit("call", [16] * 10, None)
        await batcher.close()

    asyncio.run(run())
    assert [len(batch) for batch in runner.batches] == [4, 4, 2]


def test_an_expired_call_is_dropped_before_the_runner_sees_it(runner: FakeRunner) -> None:
    metrics = model_metrics()

    async def run() -> None:
        batcher = await started(Batcher("m", runner, limits(), metrics))
        runner.gate.clear()
        first = asyncio.ensure_future(batcher.submit("first", [5], None))
        await asyncio.to_thread(runner.entered.wait, 10)  # the runner is busy with "first"
        soon = time.monotonic() + 0.05
        late = asyncio.ensure_future(batcher.submit("late", [5, 5], soon))
        await until(lambda: batcher.queued == 2 and time.monotonic() > soon, what="late queued and expired")
        runner.gate.set()
        await first
        with pytest.raises(DeadlineExceeded):
            await late
        assert batcher.queued == 0
        await batcher.close()

    asyncio.run(run())
    assert "late" not in runner.payloads()
    assert metrics.deadline_dropped._value.get() == 2


def test_a_cancelled_call_frees_its_queue_slots_at_once(runner: FakeRunner) -> None:
    async def run() -> None:
        batcher = await started(Batcher("m", runner, limits(), model_metrics()))
        runner.gate.clear()
        first = asyncio.ensure_future(batcher.submit("first", [5], None))
        await asyncio.to_thread(runner.entered.wait, 10)
        gone = asyncio.ensure_future(batcher.submit("gone", [5, 6, 7], None))
        await until(lambda: batcher.queued == 3, what="three rows queued")
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        assert batcher.queued == 0
        runner.gate.set()
        await first
        await batcher.submit("after", [5], None)
        await batcher.close()

    asyncio.run(run())
    assert runner.payloads() == ["first", "after"]


@pytest.mark.parametrize(("left", "counted"), [(0.01, 2), (5.0, 0)])
def test_a_call_reset_by_its_clients_deadline_timer_counts_as_expired(
    runner: FakeRunner, left: float, counted: int
) -> None:
    """A client resets its call when its own clock runs out, a little before the server's
    deadline: its dropped rows count as expired. A call cancelled long before does not."""
    metrics = model_metrics()

    async def run() -> None:
        batcher = await started(Batcher("m", runner, limits(), metrics))
        runner.gate.clear()
        first = asyncio.ensure_future(batcher.submit("first", [5], None))
        await asyncio.to_thread(runner.entered.wait, 10)
        reset = asyncio.ensure_future(batcher.submit("reset", [5, 6], time.monotonic() + left))
        await until(lambda: batcher.queued == 2, what="two rows queued")
        reset.cancel()  # the reset arrives before the server's own clock reaches the deadline
        with pytest.raises(asyncio.CancelledError):
            await reset
        runner.gate.set()
        await first
        await batcher.close()

    asyncio.run(run())
    assert metrics.deadline_dropped._value.get() == counted


def test_a_full_queue_refuses_at_once_and_accepts_again_once_drained(runner: FakeRunner) -> None:
    async def run() -> None:
        batcher = await started(Batcher("m", runner, limits(max_queue=4), model_metrics()))
        runner.gate.clear()
        first = asyncio.ensure_future(batcher.submit("first", [5], None))
        await asyncio.to_thread(runner.entered.wait, 10)
        waiting = asyncio.ensure_future(batcher.submit("waiting", [5, 5, 5], None))
        await until(lambda: batcher.queued == 3, what="the waiting call queued")
        with pytest.raises(ResourceExhausted, match="queue of model 'm' is full"):
            await batcher.submit("refused", [5, 5], None)
        runner.gate.set()
        await asyncio.gather(first, waiting)
        await batcher.submit("accepted", [5, 5], None)
        await batcher.close()

    asyncio.run(run())
    assert "refused" not in runner.payloads()


def test_close_finishes_queued_work_then_refuses_new_calls(runner: FakeRunner) -> None:
    async def run() -> None:
        batcher = await started(Batcher("m", runner, limits(), model_metrics()))
        runner.gate.clear()
        queued = [asyncio.ensure_future(batcher.submit(f"call{i}", [5], None)) for i in range(3)]
        await asyncio.to_thread(runner.entered.wait, 10)
        closing = asyncio.ensure_future(batcher.close())
        await asyncio.sleep(0)  # one step of the loop: close runs up to its wait for the queue
        with pytest.raises(Unavailable):
            await batcher.submit("late", [5], None)
        assert not closing.done(), "close must wait for the queued calls"
        runner.gate.set()
        await closing
        assert all(call.done() and call.exception() is None for call in queued)

    asyncio.run(run())
    assert sorted(runner.payloads()) == ["call0", "call1", "call2"]


def test_a_failing_batch_fails_its_calls_and_the_batcher_goes_on(runner: FakeRunner) -> None:
    runner.fail_on = "bad"

    async def run() -> None:
        batcher = await started(Batcher("m", runner, limits(), model_metrics()))
        with pytest.raises(Internal):
            await batcher.submit("bad", [5], None)
        job = await batcher.submit("good", [5], None)
        assert outputs_by_index(job)[0][0] == "good"
        await batcher.close()

    asyncio.run(run())


def test_calls_waiting_together_share_one_batch_and_finish_together(runner: FakeRunner) -> None:
    async def run() -> None:
        batcher = await started(Batcher("m", runner, limits(), model_metrics()))
        runner.gate.clear()
        first = asyncio.ensure_future(batcher.submit("first", [5], None))
        await asyncio.to_thread(runner.entered.wait, 10)
        held_from = time.monotonic()  # "first" is in the runner from before here
        rest = [asyncio.ensure_future(batcher.submit(f"call{i}", [5], None)) for i in range(8)]
        await until(lambda: batcher.queued == 8, what="eight calls queued")
        held = time.monotonic() - held_from  # ... to after here: the gate held it all along
        runner.gate.set()
        first_job, *rest_jobs = await asyncio.gather(first, *rest)
        # The first batch ran while the gate held it; the rest queued from their submit until it opened.
        assert first_job.run_seconds >= held, (first_job.run_seconds, held)
        assert all(job.queue_seconds > 0 for job in rest_jobs), [job.queue_seconds for job in rest_jobs]
        await batcher.close()

    asyncio.run(run())
    assert [len(batch) for batch in runner.batches] == [1, 8], "the 8 calls queued meanwhile form one batch"


@pytest.mark.parametrize("threads", [2, 3])
def test_several_batcher_threads_run_batches_at_once(runner: FakeRunner, threads: int) -> None:
    # Each batch waits inside the runner until `threads` batches are in it together; with
    # fewer threads running batches the barrier times out and `most_inside` stays below.
    runner.meet = threading.Barrier(threads, timeout=10)

    async def run() -> list[threading.Thread]:
        batcher = await started(
            Batcher("m", runner, limits(max_concurrent_batches=threads, max_batch_size=1), model_metrics())
        )
        calls = [asyncio.ensure_future(batcher.submit(f"call{i}", [5], None)) for i in range(2 * threads)]
        await asyncio.gather(*calls)
        running = [thread for thread in threading.enumerate() if thread.name.startswith("batcher-m-")]
        await batcher.close()
        return running

    running = asyncio.run(run())
    assert runner.most_inside == threads, "the batcher threads did not run their batches at once"
    assert sorted(runner.payloads()) == sorted(f"call{i}" for i in range(2 * threads))
    assert len(running) == threads and not any(thread.is_alive() for thread in running), (
        "close stops the threads"
    )


def test_each_expired_call_gets_an_error_of_its_own(runner: FakeRunner) -> None:
    """One error instance raised in several callers would collect each one's traceback."""

    async def run() -> list[BaseException]:
        batcher = await started(Batcher("m", runner, limits(), model_metrics()))
        runner.gate.clear()
        first = asyncio.ensure_future(batcher.submit("first", [5], None))
        await asyncio.to_thread(runner.entered.wait, 10)
        soon = time.monotonic() + 0.05
        late = [asyncio.ensure_future(batcher.submit(f"late{i}", [5], soon)) for i in range(2)]
        await until(lambda: batcher.queued == 2 and time.monotonic() > soon, what="both queued and expired")
        runner.gate.set()
        await first
        errors = [error for error in await asyncio.gather(*late, return_exceptions=True)]
        await batcher.close()
        return [error for error in errors if isinstance(error, BaseException)]

    errors = asyncio.run(run())
    assert len(errors) == 2 and all(isinstance(error, DeadlineExceeded) for error in errors)
    assert errors[0] is not errors[1]


def test_a_lone_caller_is_never_held(runner: FakeRunner) -> None:
    """Calls one after another never overlap a batch: each runs at once, alone."""

    async def run() -> float:
        batcher = await started(Batcher("m", runner, limits(), model_metrics()))
        try:
            for index in range(5):
                await batcher.submit(f"call{index}", [4], None)
                assert batcher.hold == 0.0, f"call {index}: nothing arrived during its batch"
            return batcher.hold
        finally:
            await batcher.close()

    assert asyncio.run(run()) == 0.0
    assert runner.batches == [[(f"call{i}", 0, 4)] for i in range(5)]


def test_calls_arriving_during_a_batch_make_the_next_batch_wait_for_more_rows(runner: FakeRunner) -> None:
    """Rows that arrive while a batch runs show calls overlap: the next batch that is not full
    may wait (at most MAX_HOLD_S) for more; a held call still finishes when none comes."""
    holds: list[float] = []  # the hold in force when each batch was taken

    async def run() -> str:
        batcher: Batcher | None = None

        def watched(batch: Batch) -> Any:
            assert batcher is not None
            holds.append(batcher.hold)
            return runner(batch)

        batcher = await started(Batcher("m", watched, limits(), model_metrics()))
        try:
            runner.gate.clear()
            first = asyncio.ensure_future(batcher.submit("first", [4], None))
            assert await asyncio.to_thread(runner.entered.wait, 10)
            later = [asyncio.ensure_future(batcher.submit(name, [4], None)) for name in ("a", "b")]
            await until(lambda: batcher is not None and batcher.queued == 2, what="a and b queued")
            runner.gate.set()
            await asyncio.gather(first, *later)
            alone = await batcher.submit("alone", [4], None)  # nothing arrived during a+b: not held
            return str(alone.payload)
        finally:
            await batcher.close()

    assert asyncio.run(run()) == "alone"
    assert runner.batches[0] == [("first", 0, 4)]
    assert sorted(runner.batches[1]) == [("a", 0, 4), ("b", 0, 4)], "rows queued together run together"
    assert runner.batches[2] == [("alone", 0, 4)]
    assert holds[0] == 0.0, "the first batch had no batch before it"
    assert 0.0 < holds[1] <= MAX_HOLD_S, "a and b arrived while the first batch ran"
    assert holds[2] == 0.0, "nothing arrived while a and b ran"


class _Output(list[Any]):
    """A batch's output a weak reference can watch (a plain list cannot be weakly referenced)."""


def watching(runner: FakeRunner) -> tuple[Callable[[Batch], _Output], list[weakref.ref[_Output]]]:
    """A runner whose every batch output is watched by a weak reference (in the list returned)."""
    watched: list[weakref.ref[_Output]] = []

    def outputs(batch: Batch) -> _Output:
        output = _Output(runner(batch))
        watched.append(weakref.ref(output))
        return output

    return outputs, watched


def test_an_idle_batcher_thread_keeps_no_output_of_its_last_batch(runner: FakeRunner) -> None:
    """An idle thread waiting for work must not pin its last batch: through the batch's calls
    it would hold the model's outputs (every layer's attention for an encoder) until the
    next batch comes, hundreds of MB per thread."""
    outputs, watched = watching(runner)

    async def run() -> None:
        batcher = await started(Batcher("m", outputs, limits(), model_metrics()))
        try:
            job = await batcher.submit("call", [5, 9], None)
            assert outputs_by_index(job)[1][2] == 9
            del job  # the caller is done with it; the thread goes back to waiting for work

            def released() -> bool:
                gc.collect()
                return bool(watched) and all(ref() is None for ref in watched)

            await until(released, timeout=5.0, what="the idle batcher thread to let go of its last batch")
        finally:
            await batcher.close()

    asyncio.run(run())


def test_a_finished_call_is_freed_without_the_cyclic_collector(runner: FakeRunner) -> None:
    """A call's job, and through it the outputs of the batches that carried its rows, must go
    when the caller lets go of it: a job in a reference cycle (its own future's result, once)
    stays until the cyclic collector runs, and an encoder's attention with it."""
    outputs, watched = watching(runner)

    async def run() -> None:
        batcher = await started(Batcher("m", outputs, limits(), model_metrics()))
        gc.collect()
        gc.disable()
        try:
            job = await batcher.submit("call", [5, 9, 40], None)
            assert sorted(outputs_by_index(job)) == [0, 1, 2]
            del job

            def released() -> bool:
                return bool(watched) and all(ref() is None for ref in watched)

            await until(released, timeout=5.0, what="the finished call's outputs to be freed")
        finally:
            gc.enable()
            await batcher.close()

    asyncio.run(run())
