"""KServe V2 / Triton HTTP/REST: health, metadata, config, statistics, repository index and
inference, on the same V2 servicer as gRPC (one set of per-model statistics for both).

Health answers 200 for true and 400 for false, as the protocol says; `/v2/health/*` needs
no token (orchestrator probes). Errors are `{"error": "<message>"}` with the status's HTTP
code.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from attnserve.service.api.http.calls import HttpCalls, parse_json
from attnserve.service.api.http.errors import v2_error
from attnserve.service.api.http.proto_json import to_json
from attnserve.service.api.http.v2_codec import HEADER_LENGTH, encode_response, parse_request
from attnserve.service.api.v2.schema import config, metadata, statistics
from attnserve.service.api.v2.servicer import EXTENSIONS, SERVER_NAME, V2Api
from attnserve.service.engine.core import State
from attnserve.service.engine.model import LoadedModel
from attnserve.service.errors import InvalidArgument, NotFound, ServiceError, Status
from attnserve.service.grpc.calls import CallRecord
from attnserve.service.proto.inference import grpc_service_pb2 as pb

# The binary tensor data extension is implemented in full on this port.
REST_EXTENSIONS = (*EXTENSIONS, "binary_tensor_data")
MODEL = "/v2/models/{name}"
Endpoint = Callable[[Request], Awaitable[Response]]
VERSIONED = "/v2/models/{name}/versions/{version}"


def _path(request: Request, key: str) -> str:
    return str(request.path_params.get(key, ""))


class V2Rest:
    def __init__(self, calls: HttpCalls, api: V2Api, server_version: str) -> None:
        self.calls = calls
        self.api = api
        self.core = api.core
        self._server_version = server_version

    def routes(self) -> list[BaseRoute]:
        routes: list[BaseRoute] = [
            Route("/v2/health/live", self._open(self.live)),
            Route("/v2/health/ready", self._open(self.ready)),
            Route("/v2", self._info(self.server_metadata, gated=False)),
            Route("/v2/models/stats", self._info(self.stats)),
            Route("/v2/repository/index", self._info(self.repository_index), methods=["POST"]),
        ]
        for base in (VERSIONED, MODEL):  # the versioned forms first: they are the longer paths
            routes += [
                Route(f"{base}/ready", self._open(self.model_ready)),
                Route(f"{base}/config", self._info(self.model_config)),
                Route(f"{base}/stats", self._info(self.stats)),
                Route(f"{base}/infer", self.infer, methods=["POST"]),
                Route(base, self._info(self.model_metadata)),
            ]
        routes.append(Route("/v2/repository/models/{name}/{action}", self.unsupported, methods=["POST"]))
        return routes

    # --- health: no token, no gate ----------------------------------------------------------
    @staticmethod
    def _open(check: Callable[[Request], bool]) -> Endpoint:
        async def endpoint(request: Request) -> Response:
            return Response(status_code=200 if check(request) else 400)

        return endpoint

    def live(self, request: Request) -> bool:
        return True

    def ready(self, request: Request) -> bool:
        return self.core.gate.state is State.SERVING

    def model_ready(self, request: Request) -> bool:
        try:
            self.api.model(_path(request, "name"), _path(request, "version"))
        except ServiceError:
            return False  # an unknown model or version is simply not ready
        return self.ready(request)

    # --- metadata ---------------------------------------------------------------------------
    def _info(self, method: Callable[[Request], Awaitable[object]], *, gated: bool = True) -> Endpoint:
        async def endpoint(request: Request) -> Response:
            async def handle(request: Request, record: CallRecord) -> Response:
                document = await method(request)
                return JSONResponse(document)

            return await self.calls.run(request, handle, v2_error, counted=False, gated=gated)

        return endpoint

    def _model(self, request: Request) -> LoadedModel:
        return self.api.model(_path(request, "name"), _path(request, "version"))

    async def server_metadata(self, request: Request) -> dict[str, object]:
        return {"name": SERVER_NAME, "version": self._server_version, "extensions": list(REST_EXTENSIONS)}

    async def model_metadata(self, request: Request) -> dict[str, object]:
        model = self._model(request)
        return to_json(metadata(model, self.core.repository.models[model.name].versions))

    async def model_config(self, request: Request) -> dict[str, object]:
        return to_json(config(self._model(request), self.core.settings))

    async def stats(self, request: Request) -> dict[str, object]:
        served = self.core.repository.models
        name, version = _path(request, "name"), _path(request, "version")
        if version:
            models = [self._model(request)]
        elif name:
            entry = served[self._model(request).name]
            models = [entry.versions[v] for v in sorted(entry.versions)]
        else:
            models = [entry.versions[v] for entry in served.values() for v in sorted(entry.versions)]
        stats = [statistics(model, self.api.request_stats(model)) for model in models]
        return to_json(pb.ModelStatisticsResponse(model_stats=stats))

    async def repository_index(self, request: Request) -> list[dict[str, object]]:
        body = await self.calls.body(request)
        document = parse_json(body) if body.strip() else {}
        ready = document.get("ready", False) if isinstance(document, dict) else None
        if not isinstance(ready, bool):
            raise InvalidArgument('request body: expected {} or {"ready": true|false}')
        index = await self.api.index(pb.RepositoryIndexRequest(ready=ready))
        return [to_json(entry) for entry in index.models]  # a bare list, as Triton answers

    async def unsupported(self, request: Request) -> Response:
        action = _path(request, "action")
        error = ServiceError(
            f"model repository {action[:32]}: not supported; the server loads its repository at start "
            "and with --repository-poll-seconds",
            Status.UNIMPLEMENTED,
        )
        if action not in ("load", "unload"):
            error = NotFound(f"no such route: {request.url.path[:200]}")
        return v2_error(error)

    # --- inference --------------------------------------------------------------------------
    async def infer(self, request: Request) -> Response:
        return await self.calls.run(request, self._infer, v2_error, counted=True)

    async def _infer(self, request: Request, record: CallRecord) -> Response:
        body = await self.calls.body(request)
        rest = parse_request(
            body, request.headers.get(HEADER_LENGTH), _path(request, "name"), _path(request, "version")
        )
        response = pb.ModelInferResponse()
        await self.api.infer_into(rest.message, self.calls.deadline(request), record, response)
        content, header_length = encode_response(response, rest)
        if header_length is None:
            return Response(content, media_type="application/json")
        return Response(
            content,
            media_type="application/octet-stream",
            headers={"Inference-Header-Content-Length": str(header_length)},
        )
