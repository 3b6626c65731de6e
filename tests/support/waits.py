"""Waiting for a positive event instead of sleeping: a test polls the state it expects
(a metric, a reply, a queue length) and fails with its own message when it does not come
in time. The timeout bounds a broken run; a passing test waits only as long as the event takes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


def eventually(condition: Callable[[], bool], timeout: float = 10.0, interval: float = 0.05) -> bool:
    """Whether `condition` holds within `timeout` seconds, polled every `interval`."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


def wait_until(
    condition: Callable[[], bool], timeout: float = 10.0, interval: float = 0.01, what: str = "the condition"
) -> None:
    """Return once `condition` holds; AssertionError naming `what` after `timeout` seconds."""
    if not eventually(condition, timeout, interval):
        raise AssertionError(f"{what} did not hold within {timeout:g} s")


async def until(
    condition: Callable[[], bool], timeout: float = 10.0, interval: float = 0.005, what: str = "the condition"
) -> None:
    """`wait_until` inside an event loop: polls between the loop's other work, never blocks it."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not hold within {timeout:g} s")
        await asyncio.sleep(interval)
