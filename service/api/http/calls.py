"""One HTTP call through the same core as gRPC: token, admission, deadline, body limits, metrics.

`HttpCalls.run` wraps a route handler: the bearer token is checked (the same tokens and
failure counter as gRPC), the call is admitted by the core's gate (refused with 503 while
starting or draining), its deadline comes from a `timeout` header or query parameter, and
every outcome is counted with `api="http"`. A `ServiceError` becomes its JSON error in the
route's style; anything else is logged with its traceback and answered 500 with a fixed
message, never a traceback.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import zlib
from collections.abc import Awaitable, Callable

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from attnserve.service.api.http.errors import body_too_large, read_timeout
from attnserve.service.engine.core import Core
from attnserve.service.engine.metrics import UNKNOWN_MODEL
from attnserve.service.errors import (
    INTERNAL_MESSAGE,
    DeadlineExceeded,
    Internal,
    InvalidArgument,
    ServiceError,
    Status,
)
from attnserve.service.grpc.auth import UNAUTHENTICATED_MESSAGE, Tokens
from attnserve.service.grpc.calls import CallRecord

log = logging.getLogger(__name__)
API = "http"
ErrorStyle = Callable[[ServiceError], Response]
_TIMEOUT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s)?\s*$")
_UNAUTHENTICATED = ServiceError(
    UNAUTHENTICATED_MESSAGE.replace("metadata 'authorization", "header 'Authorization"),
    Status.UNAUTHENTICATED,
)


Handler = Callable[[Request, CallRecord], Awaitable[Response]]


def parse_timeout(request: Request) -> float | None:
    """Seconds from the `timeout` header or query parameter ("2.5", "2.5s" or "250ms")."""
    value = request.headers.get("timeout") or request.query_params.get("timeout")
    if value is None:
        return None
    match = _TIMEOUT.match(value)
    if match is None or float(match.group(1)) <= 0:
        raise InvalidArgument(
            f"timeout: {value[:32]!r} is not a positive duration such as 2.5, 2.5s or 250ms"
        )
    seconds = float(match.group(1))
    return seconds / 1000 if match.group(2) == "ms" else seconds


def bearer(request: Request) -> bytes:
    scheme, _, token = request.headers.get("authorization", "").strip().partition(" ")
    return token.strip().encode() if scheme.lower() == "bearer" else b""


class HttpCalls:
    def __init__(self, core: Core, tokens: Tokens | None) -> None:
        self.core = core
        self.settings = core.settings
        self._tokens = tokens
        self._metrics = core.metrics.api(API)
        self._auth_failures = core.metrics.auth_failures.labels(Status.UNAUTHENTICATED.name)

    def authenticate(self, request: Request) -> None:
        if self._tokens is not None and self._tokens.role_of(bearer(request)) is None:
            self._auth_failures.inc()
            raise _UNAUTHENTICATED

    async def body(self, request: Request) -> bytes:
        """The request body, decompressed (gzip/deflate), within the size limit and read timeout."""
        limit, seconds = self.settings.http_max_body_bytes, self.settings.http_read_timeout_s
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise body_too_large(limit)
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(seconds):
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > limit:
                        raise body_too_large(limit)
                    chunks.append(chunk)
        except TimeoutError:
            raise read_timeout(seconds) from None
        except ClientDisconnect:
            raise ServiceError("the client closed the connection", Status.CANCELLED) from None
        data = _decompress(b"".join(chunks), request.headers.get("content-encoding", ""), limit)
        # Held against --max-inflight-bytes like a gRPC body, until the call is answered.
        self.core.gate.reserve(len(data))
        request.state.reserved = getattr(request.state, "reserved", 0) + len(data)
        return data

    @staticmethod
    def deadline(request: Request) -> float | None:
        """The call's deadline as a time.monotonic() value (None when the client set none)."""
        value: float | None = getattr(request.state, "deadline", None)
        return value

    async def json(self, request: Request) -> object:
        """The body parsed as JSON (any JSON value; the caller checks its shape)."""
        return parse_json(await self.body(request))

    async def run(
        self, request: Request, handler: Handler, style: ErrorStyle, *, counted: bool, gated: bool = True
    ) -> Response:
        started = time.perf_counter()
        record = CallRecord()
        code = Status.OK.name
        admitted = False
        inflight = self._metrics.inflight
        if counted:
            self._metrics.received.inc()
            inflight.inc()
        try:
            self.authenticate(request)
            timeout = parse_timeout(request)
            request.state.deadline = None if timeout is None else time.monotonic() + timeout
            if gated:
                self.core.gate.admit()
                admitted = True
            if timeout is None:
                return await handler(request, record)
            try:
                async with asyncio.timeout(timeout):
                    return await handler(request, record)
            except TimeoutError:
                raise DeadlineExceeded(f"timeout: the call did not finish within {timeout:g} s") from None
        except Exception as exc:
            error = exc if isinstance(exc, ServiceError) else _internal(exc)
            code = error.code.name
            return style(error)
        except asyncio.CancelledError:
            code = Status.CANCELLED.name
            raise
        finally:
            if admitted:
                self.core.gate.release(getattr(request.state, "reserved", 0))
            elif getattr(request.state, "reserved", 0):
                self.core.gate.unreserve(request.state.reserved)
            if counted:
                inflight.dec()
                self._finish(record, code, started)

    def _finish(self, record: CallRecord, code: str, started: float) -> None:
        model = record.model
        self._metrics.finished(model.name if model else UNKNOWN_MODEL, code, record.texts)
        if model is not None:
            model.request_duration[API].observe(time.perf_counter() - started)


def _internal(exc: Exception) -> ServiceError:
    log.error("unexpected failure while serving an HTTP call", exc_info=exc)
    return Internal(INTERNAL_MESSAGE)


def parse_json(data: bytes) -> object:
    try:
        return json.loads(data)
    except RecursionError:
        raise InvalidArgument("request body: JSON nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, and UnicodeDecodeError for bytes that are not UTF-8
        where = f" at line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise InvalidArgument(f"request body: not valid JSON{where}") from None


def _decompress(data: bytes, encoding: str, limit: int) -> bytes:
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return data
    if encoding not in ("gzip", "deflate"):
        raise InvalidArgument(f"Content-Encoding: {encoding[:32]!r} is not supported (gzip, deflate)")
    # Bounded: a small compressed body must not expand past the limit (a zip bomb).
    inflater = zlib.decompressobj(wbits=31 if encoding == "gzip" else 15)
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error:
        raise InvalidArgument(f"request body: not valid {encoding} data") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise body_too_large(limit)
    if not inflater.eof:
        raise InvalidArgument(f"request body: truncated {encoding} data")
    return out
