"""The HTTP application: every route of the port, and the error answers for unknown routes
and methods (a trailing slash too many or too few is redirected). The security headers every
reply carries are the transport's (transport.py)."""

from __future__ import annotations

import logging
from importlib.metadata import version as package_version
from pathlib import Path
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.datastructures import URL
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Match, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

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


def _slash_redirect(request: Request) -> Response | None:
    """Starlette's redirect of a path that matches a route once its trailing slash is added or
    removed, with a `Location` of path and query only: Starlette builds it from the client's
    own `Host` header, which a client (or a cache in between) may have forged."""
    scope, path = request.scope, request.scope["path"]  # the server mounts the app at its root
    if "route" in scope or path == "/":  # a route matched: its own 404
        return None
    moved = {**scope, "path": path.rstrip("/") if path.endswith("/") else path + "/"}
    if all(route.matches(moved)[0] is Match.NONE for route in scope["router"].routes):
        return None
    location = RedirectResponse(str(URL(scope=moved))).headers["location"]
    return RedirectResponse(_relative(location))


def _relative(location: str) -> str:
    parts = urlsplit(location)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    if path.startswith("//"):  # "//host/..." is itself an absolute reference
        path = "/" + path.lstrip("/")
    return path


async def _http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    style = v2_error if request.url.path.startswith("/v2") else api_error
    error: ServiceError
    if exc.status_code == 405:
        error = method_not_allowed(request.method, request.url.path)
    elif exc.status_code == 404:
        redirect = _slash_redirect(request)
        if redirect is not None:
            return redirect
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
    app.router.redirect_slashes = False  # redirected by _http_exception, with a relative Location
    return app
