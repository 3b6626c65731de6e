"""One call from arrival to answer, the same for every transport and API.

A transport adapter (gRPC in api/grpc/handlers.py, HTTP in api/http/endpoints.py) starts a
`Call` when a request arrives (`CallLayer.start`), takes its permit first thing while
serving it (`CallLayer.admit`: UNAVAILABLE while starting or draining, engine/admission.py),
serves it with `CallLayer.serve` and converts what that returns (a result, or the
`ServiceError` to answer) to its wire form. `serve` is the one place a call ends: the status
it ended with, its permit released, its duration and texts counted under the API's label.
Errors are returned, never raised to the transport, detached from their tracebacks, so a
refused body is freed at once (see errors.detached); CancelledError propagates after the
call is counted.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from contextvars import Token
from typing import TypeVar

from opentelemetry.context import Context
from opentelemetry.trace.span import SpanContext

from attnserve.service.calls.telemetry import access_line, finish_span
from attnserve.service.engine.admission import Permit
from attnserve.service.engine.core import Core
from attnserve.service.engine.metrics import UNKNOWN_MODEL, ModelMetrics
from attnserve.service.engine.models.loading import LoadedModel
from attnserve.service.engine.models.tokenization import EncodedTexts
from attnserve.service.engine.request.attention import AttentionMode
from attnserve.service.engine.request.attribution import NO_ATTRIBUTION, Explain
from attnserve.service.engine.request.classify import Inputs, Outputs
from attnserve.service.errors import (
    INTERNAL_MESSAGE,
    DeadlineExceeded,
    Internal,
    ServiceError,
    Status,
    detached,
)
from attnserve.service.observe.logs import AccessLog, CallIds, bind_call, unbind_call
from attnserve.service.observe.tracing import CallTrace

log = logging.getLogger(__name__)

R = TypeVar("R")
# A cancellation within this long of the call's deadline is the client's deadline timer: a
# client whose deadline expires resets the call exactly as one that cancels.
DEADLINE_SLACK_S = 0.05


class Call:
    """What the call layer and the adapters know about one call (filled as they learn it)."""

    __slots__ = (
        "_permit",
        "counted",
        "deadline",
        "log_token",
        "method",
        "model",
        "outputs",
        "started",
        "texts",
        "trace",
    )  # fmt: skip

    def __init__(self, deadline: float | None, counted: bool, method: str = "") -> None:
        self._permit: Permit | None = None  # taken by CallLayer.admit
        self.deadline = deadline  # time.monotonic() value; None: the client set none
        self.counted = counted  # an inference call: in the request metrics
        self.started = time.perf_counter()
        self.model: ModelMetrics | None = None  # the model version it resolved
        self.texts = 0
        self.method = method  # <service>/<method> or <HTTP method> <route>, when traced or logged
        self.outputs: Outputs | None = None  # what the engine returned: its stage times
        self.trace: CallTrace | None = None  # its span, when traced (service/observe/tracing.py)
        self.log_token: Token[CallIds | None] | None = None  # its ids bound for log records

    @property
    def permit(self) -> Permit:
        """The call's permit (engine/admission.py); only an admitted call has one."""
        if self._permit is None:
            raise Internal("the call was served before it was admitted")
        return self._permit

    @property
    def span_context(self) -> SpanContext | None:
        """What the engine carries with the call's texts (None when the call is not traced)."""
        return None if self.trace is None else self.trace.span_context

    def name_request(self, request_id: str) -> None:
        """The client's request id, in every log record of the rest of the call."""
        if request_id:
            token = bind_call(request_id, None if self.trace is None else self.trace.ids)
            if self.log_token is None:
                self.log_token = token


async def classify(
    core: Core,
    call: Call,
    model: LoadedModel,
    *,
    texts: Sequence[str] | None = None,
    encoded: EncodedTexts | None = None,
    mode: AttentionMode = AttentionMode.NONE,
    top_k: int = 0,
    explain: Explain = NO_ATTRIBUTION,
) -> Outputs:
    """The engine's part of a call, the same for every plane: the call's record filled (its
    model version and texts, for the metrics), its deadline, trace and permit handed to the
    engine with the texts (or rows of ids), its outputs kept (its stage spans read them)."""
    call.model = model.metrics
    call.texts = len(texts) if texts is not None else len(encoded) if encoded is not None else 0
    inputs = Inputs(
        texts=texts,
        encoded=encoded,
        mode=mode,
        top_k=top_k,
        deadline=call.deadline,
        trace=call.span_context,
        explain=explain,
    )
    out = await core.classify(model, inputs, call.permit)
    call.outputs = out
    return out


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
        self.tracing = core.tracing  # None while tracing is off: a call pays one test
        sample = core.settings.access_log_sample
        self._access = AccessLog(sample) if sample > 0.0 else None
        # Whether adapters name their calls (span name, access line's method).
        self.observed = self.tracing is not None or self._access is not None
        self._metrics = core.metrics.api(api)

    def received(self) -> None:
        """Count an inference call handed over by the transport (before it is served)."""
        self._metrics.received.inc()

    def start(
        self,
        *,
        deadline: float | None = None,
        counted: bool,
        name: str = "",
        parent: Context | None = None,
    ) -> Call:
        """A new call. `name`: its span name and access-line method, given when `observed`;
        `parent`: the caller's trace context."""
        if counted:
            self._metrics.inflight.inc()
        call = Call(deadline, counted, name)
        if counted and self.tracing is not None and name:
            call.trace = self.tracing.start_call(name, api=self.api, parent=parent, started=call.started)
            if call.trace is not None:
                call.log_token = bind_call("", call.trace.ids)
        return call

    def admit(self, call: Call, within: Permit | None = None) -> Permit:
        """Take the call's permit, once, as the transport's first step in serving it: refused
        UNAVAILABLE at once while the server starts or drains. `within`: the permit of the
        stream that carries the call (its messages hold bytes only)."""
        if call._permit is not None:
            raise Internal("a call was admitted twice")
        permit = self.core.gate.try_acquire_permit() if within is None else within.within()
        call._permit = permit
        return permit

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
        """Release the call's permit and count it (inference calls) with `status`; then its
        access line and span, if it has them, and unbind its log ids."""
        if call._permit is not None:
            call._permit.release()
        if call.counted:
            self._metrics.inflight.dec()
            model = call.model
            self._metrics.finished(model.name if model else UNKNOWN_MODEL, status.name, call.texts)
            ended = time.perf_counter()
            if model is not None:
                model.request_duration[self.api].observe(ended - call.started)
            if self._access is not None and self._access.enabled:
                access_line(self._access, self.api, call, status, ended)
            if call.trace is not None:
                finish_span(call.trace, call, status, ended)
        if call.log_token is not None:
            unbind_call(call.log_token)
            call.log_token = None
