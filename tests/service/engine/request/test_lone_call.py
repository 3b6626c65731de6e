"""A lone call runs on the event loop; overlapping calls, slow calls and a fixed delay do not.

The batcher is driven with a runner that records the thread each batch ran on, so each test
sees where a call's batch ran, not how long it took. Its cost model predicts a text's run
time from its length alone: a text of `SLOW_LENGTH` tokens or more is predicted to be slow.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from attnserve.service.engine.request.batcher import Batcher
from attnserve.service.engine.request.lone import LONE_MAX_RUN_S, PROBE_EVERY
from attnserve.service.engine.request.queue import Batch
from tests.service.engine.request.test_batcher import limits, model_metrics


class ThreadRecorder:
    """Runs nothing; records the thread of every batch and how many rows it held."""

    def __init__(self, hold: threading.Event | None = None) -> None:
        self.threads: list[str] = []
        self.sizes: list[int] = []
        self.hold = hold
        self.entered = threading.Event()

    def __call__(self, batch: Batch) -> list[Any]:
        self.entered.set()
        if self.hold is not None:
            assert self.hold.wait(10), "the test never let the batch finish"
        self.threads.append(threading.current_thread().name)
        self.sizes.append(len(batch.rows))
        return [row.job.payload for row in batch.rows]


SLOW_LENGTH = 100


def predicted(payload: Any, length: int) -> float:
    """A text's predicted run time: quick below SLOW_LENGTH tokens, over the loop's limit from it."""
    return LONE_MAX_RUN_S / 10 if length < SLOW_LENGTH else LONE_MAX_RUN_S * 5


def lone_batcher(recorder: ThreadRecorder, **overrides: Any) -> Batcher:
    batcher = Batcher("m", recorder, limits(**overrides), model_metrics(), lone_path=True)
    batcher.start()
    return batcher


async def submit(batcher: Batcher, payload: Any, length: int, *, alone: bool = True) -> None:
    """A one-text call as the predictor submits it: its cost predicted, whether it came alone."""
    await batcher.submit(payload, [length], None, predicted=predicted(payload, length), alone=alone)


async def one_by_one(batcher: Batcher, calls: int, *, alone: bool = True) -> None:
    for i in range(calls):
        await submit(batcher, i, 5, alone=alone)


def test_calls_one_at_a_time_run_on_the_loop_except_the_probes() -> None:
    recorder = ThreadRecorder()

    async def run() -> None:
        batcher = lone_batcher(recorder)
        await one_by_one(batcher, 4 * PROBE_EVERY)
        await batcher.close()

    asyncio.run(run())
    on_loop = [name == threading.main_thread().name for name in recorder.threads]
    # The first call goes to a thread (the model's speed is not known yet); after it, every
    # PROBE_EVERY-th lone call goes to a thread too, and the rest run on the loop.
    assert on_loop[0] is False
    assert on_loop.count(True) == len(on_loop) - 1 - (len(on_loop) - 1) // PROBE_EVERY
    assert all(not on_loop[i] for i in range(1, len(on_loop)) if i % PROBE_EVERY == 0)


def test_no_call_runs_on_the_loop_while_another_is_in_flight() -> None:
    recorder = ThreadRecorder()

    async def run() -> None:
        batcher = lone_batcher(recorder)
        await one_by_one(batcher, 2 * PROBE_EVERY, alone=False)
        await batcher.close()

    asyncio.run(run())
    assert threading.main_thread().name not in recorder.threads


def test_after_calls_overlap_none_runs_on_the_loop_for_a_while() -> None:
    hold = threading.Event()
    recorder = ThreadRecorder(hold)

    async def run() -> None:
        batcher = lone_batcher(recorder)
        first = asyncio.ensure_future(submit(batcher, "first", 5))
        await asyncio.to_thread(recorder.entered.wait, 10)
        second = asyncio.ensure_future(submit(batcher, "second", 5))  # arrives during a batch
        await asyncio.sleep(0)
        hold.set()
        await asyncio.gather(first, second)
        recorder.threads.clear()
        await one_by_one(batcher, 3)  # well within LONE_WINDOW_S of the overlap
        await batcher.close()

    asyncio.run(run())
    assert recorder.threads and threading.main_thread().name not in recorder.threads


def test_a_fixed_delay_or_a_slow_model_keeps_every_call_off_the_loop() -> None:
    class Slow(ThreadRecorder):
        def __call__(self, batch: Batch) -> list[Any]:
            threading.Event().wait(LONE_MAX_RUN_S * 2)  # a text that takes the model this long
            return super().__call__(batch)

    delayed, slow = ThreadRecorder(), Slow()

    async def run() -> None:
        for recorder, overrides in ((delayed, {"max_delay_s": 0.0001}), (slow, {})):
            batcher = lone_batcher(recorder, **overrides)
            await one_by_one(batcher, PROBE_EVERY)
            await batcher.close()

    asyncio.run(run())
    assert delayed.threads and threading.main_thread().name not in delayed.threads
    assert slow.threads and threading.main_thread().name not in slow.threads


def test_a_call_of_several_texts_goes_to_the_threads() -> None:
    recorder = ThreadRecorder()

    async def run() -> None:
        batcher = lone_batcher(recorder)
        await one_by_one(batcher, 2)  # the model's one-text time is known from here on
        recorder.threads.clear()
        await batcher.submit("pair", [5, 6], None, alone=True)
        await batcher.close()

    asyncio.run(run())
    assert recorder.threads and threading.main_thread().name not in recorder.threads


def test_a_quick_call_never_lets_a_slow_one_onto_the_loop() -> None:
    recorder = ThreadRecorder()

    async def run() -> None:
        batcher = lone_batcher(recorder)
        await one_by_one(batcher, 2)  # a short text ran quickly: the next short one runs on the loop
        recorder.threads.clear()
        for length in (5, SLOW_LENGTH, 5, 4 * SLOW_LENGTH):
            await submit(batcher, length, length)
        await batcher.close()

    asyncio.run(run())
    main = threading.main_thread().name
    assert [name == main for name in recorder.threads] == [True, False, True, False]


def test_without_a_predicted_cost_no_call_runs_on_the_loop() -> None:
    recorder = ThreadRecorder()

    async def run() -> None:
        batcher = lone_batcher(recorder)
        for i in range(PROBE_EVERY):  # alone, but no cost predicted: the model was never timed
            await batcher.submit(i, [5], None, alone=True)
        await batcher.close()

    asyncio.run(run())
    assert len(recorder.threads) == PROBE_EVERY and threading.main_thread().name not in recorder.threads
