"""The Open Inference Protocol ("KServe V2") over gRPC, as Triton speaks it:
`inference.GRPCInferenceService`, a thin adapter around the V2 plane (plane.py).

Same port as attnserve.v1; inference requests join the same batchers. Each handler
converts the message to the plane's types (v2_codec.py), calls the plane and converts back.
Methods the proto does not declare are answered UNIMPLEMENTED by grpc itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import grpc

from attnserve.service.api.grpc import v2_codec
from attnserve.service.api.grpc.handlers import Handlers
from attnserve.service.api.grpc.wire import Context, M, to_bytes
from attnserve.service.api.v2.plane import V2Plane
from attnserve.service.calls.auth import Tokens
from attnserve.service.calls.record import Call
from attnserve.service.calls.route import Route
from attnserve.service.engine.core import Core
from attnserve.service.errors import ServiceError
from attnserve.service.proto.inference import grpc_service_pb2 as pb

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].full_name
Reply = Callable[[M, Context], Awaitable[bytes]]


class V2Api:
    """Handlers of `inference.GRPCInferenceService`."""

    service_name = SERVICE_NAME

    def __init__(self, core: Core, plane: V2Plane, tokens: Tokens | None = None) -> None:
        self.core = core
        self.plane = plane
        self._handlers = Handlers(core, "v2", tokens)

    def handler(self) -> grpc.GenericRpcHandler[bytes, bytes]:
        handlers = self._handlers
        routes = handlers.routes

        def info(
            message_type: type[M], method: Reply[M], route: Route = routes.metadata
        ) -> grpc.RpcMethodHandler[bytes, bytes]:
            return handlers.unary(message_type, lambda request, context, _: method(request, context), route)

        return handlers.service(
            SERVICE_NAME,
            {
                "ServerLive": info(pb.ServerLiveRequest, self.server_live, routes.health),
                "ServerReady": info(pb.ServerReadyRequest, self.server_ready, routes.health),
                "ModelReady": info(pb.ModelReadyRequest, self.model_ready, routes.health),
                "ServerMetadata": info(pb.ServerMetadataRequest, self.server_metadata, routes.server),
                "ModelMetadata": info(pb.ModelMetadataRequest, self.model_metadata),
                "ModelConfig": info(pb.ModelConfigRequest, self.model_config),
                "ModelStatistics": info(pb.ModelStatisticsRequest, self.model_statistics),
                "RepositoryIndex": info(pb.RepositoryIndexRequest, self.repository_index),
                "ModelInfer": handlers.unary(pb.ModelInferRequest, self.model_infer),
                "ModelStreamInfer": handlers.stream(pb.ModelInferRequest, self.stream_infer, _stream_error),
            },
        )

    # --- health and metadata ------------------------------------------------------------
    async def server_live(self, request: pb.ServerLiveRequest, context: Context) -> bytes:
        return to_bytes(pb.ServerLiveResponse(live=True))

    async def server_ready(self, request: pb.ServerReadyRequest, context: Context) -> bytes:
        return to_bytes(pb.ServerReadyResponse(ready=self.plane.ready()))

    async def model_ready(self, request: pb.ModelReadyRequest, context: Context) -> bytes:
        return to_bytes(pb.ModelReadyResponse(ready=self.plane.model_ready(request.name, request.version)))

    async def server_metadata(self, request: pb.ServerMetadataRequest, context: Context) -> bytes:
        return to_bytes(v2_codec.server_metadata(self.plane.server_metadata()))

    async def model_metadata(self, request: pb.ModelMetadataRequest, context: Context) -> bytes:
        return to_bytes(v2_codec.model_metadata(self.plane.model_metadata(request.name, request.version)))

    async def model_config(self, request: pb.ModelConfigRequest, context: Context) -> bytes:
        return to_bytes(v2_codec.model_config(self.plane.model_config(request.name, request.version)))

    async def model_statistics(self, request: pb.ModelStatisticsRequest, context: Context) -> bytes:
        return to_bytes(v2_codec.model_statistics(self.plane.statistics(request.name, request.version)))

    async def repository_index(self, request: pb.RepositoryIndexRequest, context: Context) -> bytes:
        index = await self.plane.repository_index(request.repository_name, request.ready)
        return to_bytes(v2_codec.repository_index(index))

    # --- inference ----------------------------------------------------------------------
    async def model_infer(self, request: pb.ModelInferRequest, context: Context, call: Call) -> bytes:
        response = await self.plane.infer(v2_codec.infer_request(request), call)
        return v2_codec.infer_response_bytes(response)

    async def stream_infer(self, request: pb.ModelInferRequest, context: Context, call: Call) -> bytes:
        response = await self.plane.infer(v2_codec.infer_request(request), call)
        return v2_codec.stream_response_bytes(response)


def _stream_error(raw: bytes, error: ServiceError) -> bytes:
    reply = pb.ModelStreamInferResponse(error_message=f"{error.code.name}: {error.message}")
    try:
        request = pb.ModelInferRequest.FromString(raw)
    except Exception:  # the request itself did not parse: no id to echo
        return to_bytes(reply)
    reply.infer_response.id = request.id
    reply.infer_response.model_name = request.model_name
    reply.infer_response.model_version = request.model_version
    return to_bytes(reply)
