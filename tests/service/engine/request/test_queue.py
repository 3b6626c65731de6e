"""The row queue's batches, for any mix of calls: within the token budget, one lane each.

Hypothesis draws calls (their lengths and the lane their rows need) and the limits; the queue
is drained batch by batch as the batcher drains it. Every row comes out exactly once; a batch
holds rows of one lane only (the label graph's rows never ride with the attention graph's);
its padded tokens (rows x longest) stay within `max_batch_tokens` unless it is one row,
which always fits; and rows of similar length go together.
"""

from __future__ import annotations

import asyncio
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from attnserve.service.engine.request.queue import MAX_PADDING_RATIO, Batch, Job, RowQueue
from tests.service.engine.request.test_batcher import limits, model_metrics

calls = st.lists(
    st.tuples(st.lists(st.integers(1, 300), min_size=1, max_size=12), st.integers(0, 1)),
    min_size=1,
    max_size=20,
)


def _drain(queue: RowQueue) -> list[Batch]:
    batches: list[Batch] = []
    while True:
        seed, _ = queue.next_due(time.monotonic())
        if seed is None:
            return batches
        batches.append(queue.take(seed, time.monotonic(), []))


@settings(max_examples=60, deadline=None)
@given(calls=calls, max_tokens=st.integers(1, 2048), max_rows=st.integers(1, 32))
def test_batches_keep_the_token_budget_and_never_mix_lanes(
    calls: list[tuple[list[int], int]], max_tokens: int, max_rows: int
) -> None:
    loop = asyncio.new_event_loop()
    try:
        queue = RowQueue(limits(max_batch_tokens=max_tokens, max_batch_size=max_rows), model_metrics())
        jobs = []
        for lengths, lane in calls:
            job = Job(lengths, len(lengths), None, loop.create_future(), lane)
            queue.add(job, lengths)
            jobs.append(job)
        batches = _drain(queue)
    finally:
        loop.close()
    seen = sorted((id(row.job), row.index) for batch in batches for row in batch.rows)
    assert seen == sorted((id(job), index) for job in jobs for index in range(job.size))
    for batch in batches:
        assert {row.job.lane for row in batch.rows} == {batch.lane}
        assert len(batch.rows) <= max_rows
        assert batch.width == max(row.length for row in batch.rows)
        assert len(batch.rows) == 1 or batch.tokens <= max_tokens
        if len(batch.rows) > 1:  # similar lengths together: padding bounded
            assert 1.0 - batch.real / batch.tokens <= MAX_PADDING_RATIO


def test_one_long_text_does_not_pad_the_short_ones() -> None:
    loop = asyncio.new_event_loop()
    try:
        queue = RowQueue(limits(), model_metrics())
        lengths = [12] * 31 + [256]
        queue.add(Job(lengths, len(lengths), None, loop.create_future()), lengths)
        batches = _drain(queue)
    finally:
        loop.close()
    assert sorted((len(batch.rows), batch.width) for batch in batches) == [(1, 256), (31, 12)]
