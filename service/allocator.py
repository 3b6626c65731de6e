"""Handing memory freed after large requests back to the system.

glibc's malloc keeps freed memory in its heaps for reuse and gives back only what sits at
the top of a heap, so the buffers of large requests (a 4 MB body is copied several times
between the socket, grpc or uvicorn, and the handler) stay resident after the request is
answered: 300 refused 4 MB gRPC calls, 8 at once, left a server 45 MB larger, all of it in
free chunks; `malloc_trim(0)` returned all but 7 MB of it. A trim is asked for after each
large request and runs at most once a second, on the event loop (about a millisecond).
Without glibc (musl, macOS) nothing is done.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import time
from collections.abc import Callable

LARGE_BYTES = 1 << 20  # requests from this size on are worth a trim
INTERVAL_S = 1.0
DELAY_S = 0.05  # lets the answered request's task finish and drop its buffers first


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim: Callable[[int], int] = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


class Trimmer:
    """Trims the heap soon after a large request, at most once per `interval_s`."""

    def __init__(self, interval_s: float = INTERVAL_S, trim: Callable[[int], int] | None = None) -> None:
        self._interval_s = interval_s
        self._trim = trim if trim is not None else _malloc_trim()
        self._last = -interval_s
        self._pending: asyncio.TimerHandle | None = None
        self.trims = 0

    def after(self, size: int) -> None:
        """A request of `size` bytes was answered (or refused): trim soon when it was large.

        Call it from the event loop, once the request's buffers are released."""
        if size < LARGE_BYTES or self._trim is None or self._pending is not None:
            return
        loop = asyncio.get_running_loop()
        delay = max(DELAY_S, self._last + self._interval_s - time.monotonic())
        self._pending = loop.call_later(delay, self._run)

    def _run(self) -> None:
        self._pending = None
        self._last = time.monotonic()
        if self._trim is not None:
            self._trim(0)
            self.trims += 1


TRIMMER = Trimmer()  # the heap is the process's: one trimmer for every transport
# What a transport (or the call layer) calls after answering a request of `size` bytes.
release_after = TRIMMER.after
