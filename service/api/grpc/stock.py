"""The stock services of the gRPC port, `grpc.health.v1.Health` and server reflection, on
raw bytes like every attnserve method.

grpcio's own registration deserializes the body before any handler runs, so a corrupt
body is answered UNKNOWN with the exception's class name; here the body arrives as bytes,
is bounded, and a body that is not the method's message is answered INVALID_ARGUMENT.
`Health/List` is served (grpcio-health-checking's asyncio servicer leaves it to a base
class that logs a traceback), and `Check` of an unknown service sets NOT_FOUND without
raising through `context.abort`, whose error would keep the call alive in a cycle.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection, reflection_pb2
from grpc_reflection.v1alpha._async import ReflectionServicer

from attnserve.service.api.grpc.wire import parse, refuse, to_bytes
from attnserve.service.edges import quote
from attnserve.service.errors import NotFound, ResourceExhausted, ServiceError

M = TypeVar("M", bound=Message)
Context = grpc.aio.ServicerContext[Any, Any]
HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
MAX_BODY_BYTES = 64 * 1024  # a health or reflection request is a few names
DRAIN_SECONDS = 0.5


class Health(HealthServicer):  # type: ignore[misc]  # grpcio-health-checking has no types
    """grpcio-health-checking's asyncio servicer (statuses, Watch, graceful shutdown), read
    here without raising: `status` and `statuses` are what Check and List answer."""

    def status(self, service: str) -> int | None:
        status: int | None = self._server_status.get(service)
        return status

    def statuses(self) -> dict[str, int]:
        return {service: int(status) for service, status in self._server_status.items()}


def _parse(message_type: type[M], raw: bytes) -> M:
    """`parse`, bounded first: the stock services' bodies are small by nature."""
    if len(raw) > MAX_BODY_BYTES:
        raise ResourceExhausted(
            f"request body: {len(raw)} bytes; the limit for this method is {MAX_BODY_BYTES}"
        )
    return parse(message_type, raw)


def health_handler(health: Health) -> grpc.GenericRpcHandler[Any, Any]:
    """Check, List and Watch of `grpc.health.v1.Health` over `health` (no token needed)."""

    async def check(raw: bytes, context: Context) -> bytes:
        try:
            request = _parse(health_pb2.HealthCheckRequest, raw)
            status = health.status(request.service)
            if status is None:
                raise NotFound(f"service: {quote(request.service)} is not a service of this server")
        except ServiceError as error:
            return refuse(context, error)
        return to_bytes(health_pb2.HealthCheckResponse(status=status))

    async def list_(raw: bytes, context: Context) -> bytes:
        try:
            _parse(health_pb2.HealthListRequest, raw)
        except ServiceError as error:
            return refuse(context, error)
        reply = health_pb2.HealthListResponse()
        for service, status in health.statuses().items():
            reply.statuses[service].status = status
        return to_bytes(reply)

    async def watch(raw: bytes, context: Context) -> None:
        try:
            request = _parse(health_pb2.HealthCheckRequest, raw)
        except ServiceError as error:
            refuse(context, error)
            return
        await health.Watch(request, context)  # writes HealthCheckResponse messages until cancelled

    return grpc.method_handlers_generic_handler(
        HEALTH_SERVICE,
        {
            "Check": grpc.unary_unary_rpc_method_handler(check),
            "List": grpc.unary_unary_rpc_method_handler(list_),
            "Watch": grpc.unary_stream_rpc_method_handler(
                watch, response_serializer=health_pb2.HealthCheckResponse.SerializeToString
            ),
        },
    )


async def _drain(requests: AsyncIterator[bytes]) -> None:
    """Read what the client is still sending before ending the call: ending it while a
    message arrives makes grpc report INTERNAL to the client instead of the status set."""
    with contextlib.suppress(Exception):  # the time is up, or the client went away
        async with asyncio.timeout(DRAIN_SECONDS):
            async for _ in requests:
                pass


def reflection_handler(service_names: Sequence[str]) -> grpc.GenericRpcHandler[Any, Any]:
    """Server reflection for `service_names` (plus itself), refusing a corrupt request."""
    servicer = ReflectionServicer([*service_names, reflection.SERVICE_NAME])

    async def info(requests: AsyncIterator[bytes], context: Context) -> AsyncIterator[bytes]:
        refused: list[ServiceError] = []

        async def parsed() -> AsyncIterator[reflection_pb2.ServerReflectionRequest]:
            async for raw in requests:
                try:
                    yield _parse(reflection_pb2.ServerReflectionRequest, raw)
                except ServiceError as error:
                    refused.append(error)
                    return

        async for response in servicer.ServerReflectionInfo(parsed(), context):
            yield response.SerializeToString()
        if refused:
            await _drain(requests)
            refuse(context, refused[0])

    return grpc.method_handlers_generic_handler(
        reflection.SERVICE_NAME, {"ServerReflectionInfo": grpc.stream_stream_rpc_method_handler(info)}
    )
