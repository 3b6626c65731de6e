"""One call from arrival to answer, the same for every transport and API.

A transport adapter (gRPC in grpc/calls.py, HTTP in api/http/calls.py) starts a `Call`
when a request arrives (`CallLayer.start`), serves it with `CallLayer.serve` and converts
what that returns (a result, or the `ServiceError` to answer) to its wire form. `serve` is
the one place a call ends: the status it ended with, its admission released, its
duration and texts counted under the API's label. Errors are returned, never raised to
the transport, detached from their tracebacks, so a refused body is freed at once (see
errors.detached); CancelledError propagates after the call is counted.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from attnserve.service.engine.admission import Admission
from attnserve.service.engine.core import Core
from attnserve.service.engine.metrics import UNKNOWN_MODEL, ModelMetrics
from attnserve.service.errors import (
    INTERNAL_MESSAGE,
    DeadlineExceeded,
    Internal,
    ServiceError,
    Status,
    detached,
)

log = logging.getLogger(__name__)

R = TypeVar("R")
# A cancellation within this long of the call's deadline is the client's deadline timer: a
# client whose deadline expires resets the call exactly as one that cancels.
DEADLINE_SLACK_S = 0.05


class Call:
    """What the call layer and the adapters know about one call (filled as they learn it)."""

    __slots__ = ("admission", "counted", "deadline", "model", "started", "texts")

    def __init__(self, admission: Admission, deadline: float | None, counted: bool) -> None:
        self.admission = admission
        self.deadline = deadline  # time.monotonic() value; None: the client set none
        self.counted = counted  # an inference call: in the request metrics
        self.started = time.perf_counter()
        self.model: ModelMetrics | None = None  # the model version it resolved
        self.texts = 0


def error_of(exc: Exception) -> ServiceError:
    """The status to answer for `exc`, detached from its traceback; anything that is not a
    `ServiceError` is logged with its traceback and answered INTERNAL with a fixed message."""
    if isinstance(exc, ServiceError):
        return detached(exc)
    log.error("unexpected failure while serving a call", exc_info=exc)
    return Internal(INTERNAL_MESSAGE)


def cancelled_status(deadline: float | None) -> Status:
    """DEADLINE_EXCEEDED when a cancelled call's deadline has (all but) passed, else CANCELLED."""
    if deadline is not None and deadline - time.monotonic() <= DEADLINE_SLACK_S:
        return Status.DEADLINE_EXCEEDED
    return Status.CANCELLED


def deadline_after(seconds: float | None) -> float | None:
    return None if seconds is None else time.monotonic() + seconds


async def within(seconds: float | None, work: Awaitable[R]) -> R:
    """`work`, ended DEADLINE_EXCEEDED after `seconds` (for transports that do not enforce
    the client's deadline themselves)."""
    if seconds is None:
        return await work
    try:
        async with asyncio.timeout(seconds):
            return await work
    except TimeoutError:
        raise DeadlineExceeded(f"timeout: the call did not finish within {seconds:g} s") from None


class CallLayer:
    """Starts, serves and ends the calls of one API (`api` is its metrics label)."""

    def __init__(self, core: Core, api: str) -> None:
        self.core = core
        self.api = api
        self._metrics = core.metrics.api(api)

    def received(self) -> None:
        """Count an inference call handed over by the transport (before it is served)."""
        self._metrics.received.inc()

    def start(self, *, deadline: float | None = None, counted: bool, within: Admission | None = None) -> Call:
        """A new call (`within`: the admission of the stream that carries it)."""
        if counted:
            self._metrics.inflight.inc()
        return Call(self.core.admission(within), deadline, counted)

    async def serve(self, call: Call, work: Callable[[Call], Awaitable[R]]) -> R | ServiceError:
        """Run `work`: its result, or the error to answer. The call ends here."""
        status = Status.OK
        try:
            return await work(call)
        except asyncio.CancelledError:
            status = cancelled_status(call.deadline)
            raise
        except Exception as exc:
            error = error_of(exc)
            status = error.code
            return error
        finally:
            self.end(call, status)

    def end(self, call: Call, status: Status) -> None:
        """Release the call's admission and count it (inference calls) with `status`."""
        call.admission.release()
        if not call.counted:
            return
        self._metrics.inflight.dec()
        model = call.model
        self._metrics.finished(model.name if model else UNKNOWN_MODEL, status.name, call.texts)
        if model is not None:
            model.request_duration[self.api].observe(time.perf_counter() - call.started)
