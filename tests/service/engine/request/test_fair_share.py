"""A call's attribution rows hold a bounded share of the queue (a paced job): other callers are
neither refused for a full queue nor made to wait behind hundreds of rows; alone, the call
still keeps the batcher busy; cancelled, its rows not yet queued never run."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from attnserve.service.engine.request.batcher import Batcher
from attnserve.service.engine.request.queue import Batch
from tests.service.engine.request.test_batcher import limits, model_metrics

BATCH_S = 0.01


class SlowRunner:
    """Each batch takes BATCH_S; records the payloads of every batch in order."""

    def __init__(self) -> None:
        self.batches: list[list[Any]] = []
        self.lock = threading.Lock()

    def __call__(self, batch: Batch) -> list[Any]:
        time.sleep(BATCH_S)
        payloads = [row.job.payload for row in batch.rows]
        with self.lock:
            self.batches.append(payloads)
        return payloads


def _batcher(runner: SlowRunner, **overrides: Any) -> Batcher:
    batcher = Batcher("m", runner, limits(**overrides), model_metrics())
    batcher.start()
    return batcher


def test_a_paced_call_leaves_room_and_turns_for_other_callers() -> None:
    runner = SlowRunner()
    batcher = _batcher(runner, max_batch_size=4, max_queue=32)
    assert batcher.share == 4  # one batch per batcher thread, within a quarter of the queue

    async def scenario() -> None:
        big = asyncio.create_task(batcher.submit("rows", [5] * 200, None, paced=True))
        await asyncio.sleep(BATCH_S * 2)  # the big call's first batches are running
        assert batcher.queued <= batcher.share
        # 24 plain texts fit beside it: its rows hold 4 of the 32 places, not 200.
        await asyncio.gather(*(batcher.submit(f"plain{i}", [5] * 8, None) for i in range(3)))
        await big

    asyncio.run(scenario())
    # The plain calls were served within a handful of batches, not after the big call's 50.
    plain_batches = [i for i, batch in enumerate(runner.batches) if any(p != "rows" for p in batch)]
    assert plain_batches[-1] < 20, plain_batches
    asyncio.run(batcher.close())


def test_a_paced_call_alone_fills_every_batch() -> None:
    runner = SlowRunner()
    batcher = _batcher(runner, max_batch_size=8, max_queue=1024)

    async def scenario() -> None:
        job = await batcher.submit("rows", [5] * 64, None, paced=True)
        assert job.unfinished == 0 and len(job.parts) == 64

    asyncio.run(scenario())
    assert [len(batch) for batch in runner.batches] == [8] * 8
    asyncio.run(batcher.close())


def test_a_cancelled_paced_call_runs_none_of_its_waiting_rows() -> None:
    runner = SlowRunner()
    batcher = _batcher(runner, max_batch_size=4, max_queue=64)

    async def scenario() -> None:
        task = asyncio.create_task(batcher.submit("rows", [5] * 400, None, paced=True))
        await asyncio.sleep(BATCH_S * 3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await batcher.drain()
        assert batcher.queued == 0

    asyncio.run(scenario())
    ran = sum(len(batch) for batch in runner.batches)
    assert ran < 40, ran  # the few batches before the cancel, not the 400 rows
    asyncio.run(batcher.close())
