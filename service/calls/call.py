"""One call from arrival to answer, the same for every transport and API.

A transport adapter (gRPC in api/grpc/handlers.py, HTTP in api/http/handlers.py) hands a
call to `CallLayer.serve` with its route and what it read before serving it (the seconds
left to its deadline, its span name, its trace parent, its body's size, its bearer token)
and converts what that returns (a result, or the `ServiceError` to answer) to its wire
form. `serve` is the one way in and out: it starts the call's record (calls/record.py),
applies the route (the permit first, UNAVAILABLE while starting or draining,
engine/admission.py; then the bearer token where tokens are configured, calls/auth.py;
then the body's size limit and bytes), runs the work (within its deadline on a transport
that does not enforce it) and ends the call: the status it ended with, its permit
released, its duration and texts counted under its protocol and transport, and a large
body's buffers handed back to the system. Errors are returned, never raised to the
transport, detached from their tracebacks, so a refused body is freed at once (see
errors.detached); CancelledError propagates after the call is counted.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from opentelemetry.context import Context

from attnserve.service.allocator import release_after
from attnserve.service.calls.auth import Authenticator
from attnserve.service.calls.record import Call
from attnserve.service.calls.route import Route
from attnserve.service.calls.telemetry import access_line, finish_span
from attnserve.service.engine.admission import Permit
from attnserve.service.engine.core import Core
from attnserve.service.engine.metrics import UNKNOWN_MODEL
from attnserve.service.engine.request.handback import deadline_passed
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


def error_of(exc: Exception) -> ServiceError:
    """The status to answer for `exc`, detached from its traceback; anything that is not a
    `ServiceError` is logged with its traceback and answered INTERNAL with a fixed message."""
    if isinstance(exc, ServiceError):
        return detached(exc)
    log.error("unexpected failure while serving a call", exc_info=exc)
    return Internal(INTERNAL_MESSAGE)


def cancelled_status(deadline: float | None) -> Status:
    """DEADLINE_EXCEEDED when a cancelled call's deadline has (all but) passed, else CANCELLED."""
    # A client whose deadline expires resets the call exactly as one that cancels.
    if deadline_passed(deadline, time.monotonic()):
        return Status.DEADLINE_EXCEEDED
    return Status.CANCELLED


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
        # Inference calls handed over by the transport, counted before they are served.
        self.received = self._metrics.received
        # grpc ends a call at its client's deadline itself; HTTP has no deadline but the call's.
        self._enforces = transport == "http"

    async def serve(
        self, route: Route, work: Callable[[Call], Awaitable[R]], *, timeout: float | None = None,
        name: str = "", parent: Context | None = None, size: int | None = None,
        within: Permit | None = None, token: bytes = b"",
    ) -> R | ServiceError:  # fmt: skip
        """Serve a call on `route`: its record started, the route applied (its permit, the bearer
        `token` it presented, `size` bytes of body against its limit), `work` run: its result,
        or the error to answer. The call ends here. `timeout`: seconds left to the client's
        deadline; `name`: its span name and access-line method, given when `observed`;
        `parent`: the caller's trace context. A call `within` a stream was let in with the
        stream's token, and its permit is taken within the stream's."""
        # The call's record, counted in flight (inference calls) and traced when tracing is on.
        if route.counted:
            self._metrics.inflight.inc()
        call = Call(route, None if timeout is None else time.monotonic() + timeout, name)
        if route.counted and self.tracing is not None and name:
            call.trace = self.tracing.start_call(
                name, protocol=self.protocol, transport=self.transport, parent=parent, started=call.started
            )
            if call.trace is not None:
                call.context.trace = call.trace.span_context
                call.log_token = bind_call("", call.trace.ids)
        status = Status.OK
        try:
            auth = self.auth if route.token and within is None else None
            over = size is not None and route.limit and size > route.limit
            # The body's bytes are held with the permit unless a refusal is checked between them.
            early = size is not None and auth is None and not over
            if route.gated:
                hold = size if early else None
                gate = self.core.gate
                call.context.permit = gate.try_acquire_permit(hold) if within is None else within.within(hold)
            if auth is not None:
                refused = auth.refusal(token, admin=route.admin)
                if refused is not None:
                    raise refused
            if over:
                raise too_large(route, size)
            if size is not None and not early and call.context.permit is not None:
                call.context.permit.hold(size)
            if timeout is None or not self._enforces:
                return await work(call)
            try:
                async with asyncio.timeout(timeout):
                    return await work(call)
            except TimeoutError:
                raise DeadlineExceeded(f"timeout: the call did not finish within {timeout:g} s") from None
        except asyncio.CancelledError:
            status = cancelled_status(call.context.deadline)
            raise
        except Exception as exc:
            error = error_of(exc)
            status = error.code
            return error
        finally:
            self._end(call, status, size)

    def _end(self, call: Call, status: Status, size: int | None) -> None:
        """Release the call's permit and count it (inference calls) with `status`; then its
        access line and span, if it has them, and unbind its log ids; a large body's buffers
        go back to the system soon (allocator.py)."""
        context = call.context
        if context.permit is not None:
            context.permit.release()
        if call.counted:
            self._metrics.inflight.dec()
            model = context.model
            metrics = None if model is None else model.metrics
            self._metrics.finished(metrics.name if metrics else UNKNOWN_MODEL, status.name, context.texts)
            ended = time.perf_counter()
            if metrics is not None:
                metrics.request_duration[self._endpoint].observe(ended - call.started)
            if self._access is not None and self._access.enabled:
                access_line(self._access, self.transport, call, status, ended)
            if call.trace is not None:
                finish_span(call.trace, call, status, ended)
        if call.log_token is not None:
            unbind_call(call.log_token)
            call.log_token = None
        if size is not None:
            release_after(size)
