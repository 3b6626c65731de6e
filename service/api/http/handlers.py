"""HTTP route handlers over the call layer (service/calls/): token, timeout, body, errors.

`Handlers.run`, a route's endpoint (`Handlers.endpoint`), wraps a route handler with its route
(service/calls/route.py): the call layer takes the permit (health routes take none), the
bearer token is checked where the route asks for it (the same tokens and failure counter as
gRPC), the deadline comes from a `timeout` header or query parameter (the call layer ends the
call there), the body is read within the route's size limit and read timeout and held against
`max_inflight_bytes` by the call's permit, and every outcome is counted under its protocol
with `transport="http"`.
A `ServiceError` becomes its JSON error in the route's style; anything else is logged with
its traceback and answered 500 with a fixed message, never a traceback.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from functools import partial

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from attnserve.service.api.http.errors import read_timeout
from attnserve.service.calls.auth import Authenticator, Tokens, bearer_token
from attnserve.service.calls.call import CallLayer, too_large
from attnserve.service.calls.record import Call
from attnserve.service.calls.route import Route, http_routes
from attnserve.service.edges import inflate, parse_json, quote
from attnserve.service.engine.core import Core
from attnserve.service.errors import InvalidArgument, ServiceError, Status
from attnserve.service.observe.propagation import extract_headers

WHERE = "header 'Authorization"
ErrorStyle = Callable[[ServiceError], Response]
Handler = Callable[[Request, Call], Awaitable[Response]]
Endpoint = Callable[[Request], Awaitable[Response]]
_TIMEOUT = re.compile(r"^\s*([0-9]{1,12}(?:\.[0-9]{1,9})?)\s*(ms|s)?\s*$")


def parse_timeout(request: Request) -> float | None:
    """Seconds from the `timeout` header or query parameter ("2.5", "2.5s" or "250ms")."""
    value = request.headers.get("timeout") or request.query_params.get("timeout")
    if value is None:
        return None
    match = _TIMEOUT.match(value)
    if match is None or float(match.group(1)) <= 0:
        raise InvalidArgument(
            f"timeout: {quote(value)} is not a positive duration such as 2.5, 2.5s or 250ms"
        )
    seconds = float(match.group(1))
    return seconds / 1000 if match.group(2) == "ms" else seconds


class Handlers:
    """The route handlers of one protocol on the HTTP port ("native": the JSON API; "v2")."""

    def __init__(self, core: Core, tokens: Tokens | None, protocol: str) -> None:
        self.core = core
        self.settings = core.settings
        auth = None if tokens is None else Authenticator(tokens, core.metrics, WHERE)
        self.layer = CallLayer(core, protocol, "http", auth)
        self.routes = http_routes(core.settings)

    async def body(self, request: Request, call: Call) -> bytes:
        """The request body, decoded (gzip/deflate), within the size limit and read timeout,
        held by the call's permit until the call ends (like a gRPC body)."""
        limit, seconds = call.route.limit, self.settings.http_read_timeout_s
        declared = request.headers.get("content-length")
        digits = declared is not None and declared.isascii() and declared.isdigit()
        if declared is not None and digits and (len(declared) > len(str(limit)) or int(declared) > limit):
            raise too_large(call.route)
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(seconds):
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > limit:
                        raise too_large(call.route)
                    chunks.append(chunk)
        except TimeoutError:
            raise read_timeout(seconds) from None
        except ClientDisconnect:
            raise ServiceError("the client closed the connection", Status.CANCELLED) from None
        data = b"".join(chunks)
        encoding = request.headers.get("content-encoding")
        if encoding:  # an identity body is as it came
            data = inflate(data, encoding, limit=limit, too_large=lambda _: too_large(call.route))
        permit = call.context.permit
        if permit is not None:  # held until the call ends (every route with a body is gated)
            permit.hold(len(data))
        return data

    async def json(self, request: Request, call: Call) -> object:
        """The body parsed as JSON (any JSON value; the caller checks its shape)."""
        return parse_json(await self.body(request, call))

    def endpoint(self, handler: Handler, style: ErrorStyle, route: Route) -> Endpoint:
        """A route's endpoint: `run` itself, bound to the route's handler, error style and call
        route (Starlette unwraps the partial and calls it with the request, nothing between)."""
        return partial(self.run, handler=handler, style=style, route=route)

    async def run(self, request: Request, handler: Handler, style: ErrorStyle, route: Route) -> Response:
        layer = self.layer
        if route.counted:
            layer.received.inc()
        work: Callable[[Call], Awaitable[Response]]
        try:
            timeout, work = parse_timeout(request), partial(handler, request)
        except InvalidArgument as exc:  # answered through the call layer, like any refusal
            timeout, work = None, partial(_refuse, exc)
        name, parent = "", None
        if layer.observed:  # the span name and access line: the matched route's template
            parent = extract_headers(request.headers.raw) if layer.tracing is not None else None
            template = request.scope.get("route")
            name = f"{request.method} {template.path}" if template is not None else request.method
        # The token is the call layer's check, as on gRPC; read only where tokens are configured.
        token = bearer_token(request.headers.get("authorization", "")) if layer.auth is not None else b""
        result = await layer.serve(route, work, timeout=timeout, name=name, parent=parent, token=token)
        return style(result) if isinstance(result, ServiceError) else result


async def _refuse(error: ServiceError, call: Call) -> Response:
    raise error
