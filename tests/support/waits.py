"""Waiting for a positive event instead of sleeping: a test polls the state it expects
(a metric, a reply) and fails with its own message when it does not come in time."""

from __future__ import annotations

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
