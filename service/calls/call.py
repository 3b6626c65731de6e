"""One call from arrival to answer, the same for every transport and API.

A transport adapter (gRPC in api/grpc/handlers.py, HTTP in api/http/handlers.py) starts a
`Call` when a request arrives (`CallLayer.start`, with the route it arrived on), serves it
with `CallLayer.serve` and converts what that returns (a result, or the `ServiceError` to
answer) to its wire form. `serve` is the one way in and out: it applies the route (the
permit first, UNAVAILABLE while starting or draining, engine/admission.py; then the bearer
token where tokens are configured, calls/auth.py; then the body's size limit and bytes),
runs the work, and ends the call: the status it ended with, its
permit released, its duration and texts counted under its protocol and transport. Errors
are returned, never raised to the transport, detached from their tracebacks, so a refused
body is freed at once (see errors.detached); CancelledError propagates after the call is
counted.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from opentelemetry.context import Context

from attnserve.service.calls.auth import Authenticator
from attnserve.service.calls.record import Call
from attnserve.service.calls.route import Route
from attnserve.service.calls.telemetry import access_line, finish_span
from attnserve.service.engine.admission import Permit
from attnserve.service.engine.context import CallContext
from attnserve.service.engine.core import Core
from attnserve.service.engine.metrics import UNKNOWN_MODEL
from attnserve.service.errors import (
    INTERNAL_MESSAGE,
    BodyTooLarge,
    DeadlineExceeded,
    Internal,
    ServiceError,
    Status,
    detached,
)
from attnserve.service.observe.logs import AccessLog, bind_call, unbind_call

log = logging.getLogger(__name__)

R = TypeVar("R")
# A cancellation within this long of the call's deadline is the client's deadline timer: a
# client whose deadline expires resets the call exactly as one that cancels.
DEADLINE_SLACK_S = 0.05


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


def too_large(route: Route, size: int | None = None) -> BodyTooLarge:
    """The refusal of a body over `route`'s limit, for every transport (`size`: the body's
    bytes, where the transport knows them before it reads past the limit)."""
    limit, setting = route.limit, route.setting
    if size is None:
        return BodyTooLarge(f"request body: larger than the limit of {limit} bytes ({setting})")
    return BodyTooLarge(f"request body: {size} bytes; the limit for this method is {limit} ({setting})")


class CallLayer:
    """Starts, serves and ends the calls of one protocol ("native" or "v2") on one transport
    ("grpc" or "http"): the two labels of its request metrics."""

    def __init__(self, core: Core, protocol: str, transport: str, auth: Authenticator | None = None) -> None:
        self.core = core
        self.auth = auth  # None: no tokens configured, and no call presents one
        self.protocol = protocol
        self.transport = transport
        self._endpoint = (protocol, transport)  # a version's request_duration key
        self.tracing = core.tracing  # None while tracing is off: a call pays one test
        sample = core.settings.access_log_sample
        self._access = AccessLog(sample) if sample > 0.0 else None
        # Whether adapters name their calls (span name, access line's method).
        self.observed = self.tracing is not None or self._access is not None
        self._metrics = core.metrics.api(protocol, transport)

    def received(self) -> None:
        """Count an inference call handed over by the transport (before it is served)."""
        self._metrics.received.inc()

    def start(
        self, route: Route, *, deadline: float | None = None, name: str = "", parent: Context | None = None
    ) -> Call:
        """A new call on `route`. `name`: its span name and access-line method, given when
        `observed`; `parent`: the caller's trace context."""
        if route.counted:
            self._metrics.inflight.inc()
        call = Call(route, deadline, name)
        if route.counted and self.tracing is not None and name:
            call.trace = self.tracing.start_call(
                name, protocol=self.protocol, transport=self.transport, parent=parent, started=call.started
            )
            if call.trace is not None:
                call.log_token = bind_call("", call.trace.ids)
        return call

    def admit(self, call: Call, within: Permit | None = None) -> Permit:
        """Take the call's permit, once: refused UNAVAILABLE at once while the server starts or
        drains. `within`: the permit of the stream that carries the call."""
        if call.admission is not None:
            raise Internal("a call was admitted twice")
        permit = self.core.gate.try_acquire_permit() if within is None else within.within()
        trace = None if call.trace is None else call.trace.span_context
        call.admission = CallContext(permit, call.deadline, trace)
        return permit

    async def serve(
        self, call: Call, work: Callable[[Call], Awaitable[R]], *, size: int | None = None,
        within: Permit | None = None, token: bytes = b"",
    ) -> R | ServiceError:  # fmt: skip
        """Apply the call's route (its permit, the bearer `token` it presented, `size` bytes of
        body against its limit), run `work`: its result, or the error to answer. The call ends
        here. A call `within` a stream was let in with the stream's token."""
        status = Status.OK
        try:
            route = call.route
            permit = self.admit(call, within) if route.gated else None
            if route.token and self.auth is not None and within is None:
                refused = self.auth.refusal(token, admin=route.admin)
                if refused is not None:
                    raise refused
            if size is not None:
                if route.limit and size > route.limit:
                    raise too_large(route, size)
                if permit is not None:
                    permit.hold(size)
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
        """Release the call's permit and count it (inference calls) with `status`; then its
        access line and span, if it has them, and unbind its log ids."""
        if call.admission is not None:
            call.admission.permit.release()
        if call.counted:
            self._metrics.inflight.dec()
            model = call.model
            self._metrics.finished(model.name if model else UNKNOWN_MODEL, status.name, call.texts)
            ended = time.perf_counter()
            if model is not None:
                model.request_duration[self._endpoint].observe(ended - call.started)
            if self._access is not None and self._access.enabled:
                access_line(self._access, self.transport, call, status, ended)
            if call.trace is not None:
                finish_span(call.trace, call, status, ended)
        if call.log_token is not None:
            unbind_call(call.log_token)
            call.log_token = None
