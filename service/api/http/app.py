"""The HTTP application: every route of the port, the error answers for unknown routes and
methods, and the response headers every page and API reply carries."""

from __future__ import annotations

import logging
from importlib.metadata import version as package_version
from pathlib import Path
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from attnserve.service.api.http.errors import (
    api_error,
    method_not_allowed,
    not_found_route,
    v2_error,
)
from attnserve.service.api.http.handlers import Handlers
from attnserve.service.api.http.native import NativeRest
from attnserve.service.api.http.openapi import openapi_schema
from attnserve.service.api.http.v2 import V2Rest
from attnserve.service.api.native.plane import NativePlane
from attnserve.service.api.v2.plane import V2Plane
from attnserve.service.calls.auth import Tokens
from attnserve.service.engine.core import Core
from attnserve.service.errors import INTERNAL_MESSAGE, Internal, ServiceError

log = logging.getLogger(__name__)
STATIC = Path(__file__).resolve().parent / "static"
# The explorer and the docs page load only their own files: no CDN, no inline script.
_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"content-security-policy", b"default-src 'self'; img-src 'self' data:; frame-ancestors 'none'"),
    (b"referrer-policy", b"no-referrer"),
]


class _ResponseHeaders:
    """Security headers on every reply, and a redirect's `Location` without scheme and host:
    Starlette builds it from the client's own `Host` header, which a client (or a cache in
    between) may have forged. Pure ASGI (no per-request task, unlike BaseHTTPMiddleware)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = message.get("headers", [])
                if 300 <= message["status"] < 400:
                    headers = [(k, _relative(v) if k.lower() == b"location" else v) for k, v in headers]
                message["headers"] = [*headers, *_HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)


def _relative(location: bytes) -> bytes:
    parts = urlsplit(location.decode("latin-1"))
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    if path.startswith("//"):  # "//host/..." is itself an absolute reference
        path = "/" + path.lstrip("/")
    return path.encode("latin-1")


async def _http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    style = v2_error if request.url.path.startswith("/v2") else api_error
    error: ServiceError
    if exc.status_code == 405:
        error = method_not_allowed(request.method, request.url.path)
    elif exc.status_code == 404:
        error = not_found_route(request.url.path)
    else:
        error = Internal(INTERNAL_MESSAGE)
    return style(error)


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.error("unexpected failure while serving an HTTP request", exc_info=exc)
    style = v2_error if request.url.path.startswith("/v2") else api_error
    return style(Internal(INTERNAL_MESSAGE))


def build_app(core: Core, tokens: Tokens | None, classify: NativePlane, v2: V2Plane) -> ASGIApp:
    """The HTTP port's application over the planes the server built, shared with gRPC (so
    both transports count into one set of V2 statistics)."""
    schema = openapi_schema(package_version("attnserve"))

    async def index(request: Request) -> Response:
        return FileResponse(STATIC / "index.html")

    async def docs(request: Request) -> Response:
        return FileResponse(STATIC / "docs.html")

    async def openapi(request: Request) -> Response:
        return JSONResponse(schema)

    routes: list[BaseRoute] = [
        Route("/", index),
        Route("/docs", docs),
        Route("/openapi.json", openapi),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
        *V2Rest(Handlers(core, tokens, "v2"), v2).routes(),
        *NativeRest(Handlers(core, tokens, "native"), classify).routes(),
    ]
    app = Starlette(
        routes=routes,
        exception_handlers={HTTPException: _http_exception, Exception: _unexpected},
    )
    return _ResponseHeaders(app)
