"""KServe V2 / Triton HTTP/REST: health, metadata, config, statistics, repository index and
inference, a thin adapter around the V2 plane (one set of per-model statistics with
gRPC). The inference route's work, its body read and its reply written, is v2_infer.infer
(the body's reading: v2_codec.py).

Health answers 200 for true and 400 for false, as the protocol says; `/v2/health/*` needs
no token (orchestrator probes). Errors are `{"error": "<message>"}` with the status's HTTP
code.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from attnserve.service.api.http import v2_info as info
from attnserve.service.api.http.errors import v2_error
from attnserve.service.api.http.handlers import Endpoint, Handlers
from attnserve.service.api.http.v2_infer import infer
from attnserve.service.api.v2.plane import V2Plane
from attnserve.service.calls.record import Call
from attnserve.service.calls.route import Route as CallRoute
from attnserve.service.edges import check_text, parse_json
from attnserve.service.errors import InvalidArgument, NotFound, ServiceError, Status

# The binary tensor data extension is implemented in full on this port.
BINARY_EXTENSION = "binary_tensor_data"
MODEL = "/v2/models/{name}"
VERSIONED = "/v2/models/{name}/versions/{version}"


def _path(request: Request, key: str) -> str:
    """A path parameter of the route, valid Unicode (ASCII is, without a look)."""
    value = str(request.path_params.get(key, ""))
    return value if value.isascii() else check_text(value, field=key)


class V2Rest:
    def __init__(self, handlers: Handlers, plane: V2Plane) -> None:
        self.handlers = handlers
        self.plane = plane
        self._infer = partial(infer, plane, handlers)  # the inference route's work

    def routes(self) -> list[BaseRoute]:
        server = self.handlers.routes.server
        infer = self.handlers.endpoint(self._infer, v2_error, self.handlers.routes.inference)
        routes: list[BaseRoute] = [
            Route("/v2/health/live", self._check(self.live)),
            Route("/v2/health/ready", self._check(self.ready)),
            Route("/v2", self._info(self.server_metadata, server)),
            Route("/v2/models/stats", self._info(self.stats)),
            Route("/v2/repository/index", self._info(self.repository_index), methods=["POST"]),
        ]
        for base in (VERSIONED, MODEL):  # the versioned forms first: they are the longer paths
            routes += [
                Route(f"{base}/ready", self._check(self.model_ready)),
                Route(f"{base}/config", self._info(self.model_config)),
                Route(f"{base}/stats", self._info(self.stats)),
                Route(f"{base}/infer", infer, methods=["POST"]),
                Route(base, self._info(self.model_metadata)),
            ]
        unsupported = self._info(self.unsupported)
        routes.append(Route("/v2/repository/models/{name}/{action}", unsupported, methods=["POST"]))
        return routes

    # --- health: no token, no admission (the health route) ---------------------------------
    def _check(self, check: Callable[[Request], bool]) -> Endpoint:
        async def handle(request: Request, call: Call) -> Response:
            return Response(status_code=200 if check(request) else 400)

        return self.handlers.endpoint(handle, v2_error, self.handlers.routes.health)

    def live(self, request: Request) -> bool:
        return True

    def ready(self, request: Request) -> bool:
        return self.plane.ready()

    def model_ready(self, request: Request) -> bool:
        try:
            return self.plane.model_ready(_path(request, "name"), _path(request, "version"))
        except ServiceError:
            return False

    # --- metadata ---------------------------------------------------------------------------
    def _info(
        self, method: Callable[[Request, Call], Awaitable[Any]], route: CallRoute | None = None
    ) -> Endpoint:
        async def handle(request: Request, call: Call) -> Response:
            return JSONResponse(await method(request, call))

        return self.handlers.endpoint(handle, v2_error, route or self.handlers.routes.metadata)

    async def server_metadata(self, request: Request, call: Call) -> dict[str, object]:
        metadata = self.plane.server_metadata()
        return {
            "name": metadata.name,
            "version": metadata.version,
            "extensions": [*metadata.extensions, BINARY_EXTENSION],
        }

    async def model_metadata(self, request: Request, call: Call) -> info.ModelMetadataJson:
        return info.model_metadata(
            self.plane.model_metadata(_path(request, "name"), _path(request, "version"))
        )

    async def model_config(self, request: Request, call: Call) -> info.ModelConfigJson:
        return info.model_config(self.plane.model_config(_path(request, "name"), _path(request, "version")))

    async def stats(self, request: Request, call: Call) -> info.ModelStatisticsJson:
        return info.model_statistics(self.plane.statistics(_path(request, "name"), _path(request, "version")))

    async def repository_index(self, request: Request, call: Call) -> list[info.IndexEntryJson]:
        body = await self.handlers.body(request, call)
        document = parse_json(body) if body.strip() else {}
        ready = document.get("ready", False) if isinstance(document, dict) else None
        if not isinstance(ready, bool):
            raise InvalidArgument('request body: expected {} or {"ready": true|false}')
        return info.repository_index(await self.plane.repository_index(ready=ready))

    async def unsupported(self, request: Request, call: Call) -> None:
        action = str(request.path_params.get("action", ""))
        if action not in ("load", "unload"):
            raise NotFound(f"no such route: {request.url.path[:200]}")
        raise ServiceError(
            f"model repository {action}: not supported; the server loads its repository at start "
            "and with --repository-poll-seconds",
            Status.UNIMPLEMENTED,
        )
