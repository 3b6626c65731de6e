"""Calls handed back to their event loops when their batches end, from any thread.

A batcher thread finishes or fails calls whose futures belong to an event loop: each loop
gets one `call_soon_threadsafe` for all of its calls (a self-pipe write and a loop
iteration each, so never one per call). A lone call run on the loop's own thread needs no
hand-back: its caller reads its job as soon as the batch returns (batcher.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from attnserve.service.engine.request.queue import Job
from attnserve.service.errors import INTERNAL_MESSAGE, DeadlineExceeded, Internal

EXPIRED_MESSAGE = "the deadline passed while the texts were queued"
# A cancellation within this long of a call's deadline is its client's deadline timer: the
# client resets the call when its own clock runs out, a little before the server's does.
DEADLINE_SLACK_S = 0.05


def complete(jobs: list[Job]) -> None:
    # The result is None, not the job: a job that was its own future's result would be a
    # reference cycle, and its batches' outputs would stay resident until the cyclic collector
    # ran (hundreds of MB after a round of large attention replies).
    for job in jobs:
        if not job.future.done():
            job.future.set_result(None)


def deadline_passed(deadline: float | None, now: float) -> bool:
    """Whether a call cancelled at `now` (time.monotonic()) was ended by its deadline."""
    return deadline is not None and deadline - now <= DEADLINE_SLACK_S


def expired_error() -> Exception:
    return DeadlineExceeded(EXPIRED_MESSAGE)


def internal_error() -> Exception:
    return Internal(INTERNAL_MESSAGE)


def refuse(jobs: list[Job], error: Callable[[], Exception]) -> None:
    """Fail each job with an error of its own: one instance raised in several callers would
    collect each one's traceback (see errors.detached)."""
    for job in jobs:
        # The error's traceback will hold the caller's frame, and so the job: drop the outputs
        # of the batches that carried some of its rows now, not when the cycle is collected.
        job.parts.clear()
        if not job.future.done():
            job.future.set_exception(error())
            job.future.exception()  # mark retrieved: the caller may be gone


def hand_back(jobs: list[Job]) -> None:
    """Complete `jobs` on their event loops: one call_soon_threadsafe per loop."""
    _by_loop(jobs, complete)


def fail(jobs: list[Job], error: Callable[[], Exception]) -> None:
    if jobs:
        _by_loop(jobs, lambda group: refuse(group, error))


def _by_loop(jobs: list[Job], action: Callable[[list[Job]], None]) -> None:
    if not jobs:
        return
    loop = jobs[0].future.get_loop()
    if all(job.future.get_loop() is loop for job in jobs):
        loop.call_soon_threadsafe(action, jobs)
        return
    groups: dict[asyncio.AbstractEventLoop, list[Job]] = {}
    for job in jobs:
        groups.setdefault(job.future.get_loop(), []).append(job)
    for each, group in groups.items():
        each.call_soon_threadsafe(action, group)
