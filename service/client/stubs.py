"""Method handles for a gRPC service, built once per channel from its descriptor.

Every client (sync, asyncio, admin) calls methods the same way: by name, with the request
and reply types the proto declares, so no client writes a serializer pair by hand.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message_factory import GetMessageClass
from grpc_health.v1 import health_pb2


def unary(channel: Any, service: ServiceDescriptor, method: str) -> Any:
    """A unary-unary callable (blocking or awaitable, as the channel is) for `service.method`."""
    return _handle(channel.unary_unary, service, method)


def bidi(channel: Any, service: ServiceDescriptor, method: str) -> Any:
    """A stream-stream callable for `service.method`."""
    return _handle(channel.stream_stream, service, method)


def _handle(factory: Any, service: ServiceDescriptor, method: str) -> Any:
    spec = service.methods_by_name[method]
    request, reply = GetMessageClass(spec.input_type), GetMessageClass(spec.output_type)
    return factory(
        f"/{service.full_name}/{method}",
        request_serializer=request.SerializeToString,
        response_deserializer=reply.FromString,
    )


def health_name(status: int) -> str:
    """ "SERVING", "NOT_SERVING", ... for a grpc.health.v1 status number."""
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(status))
