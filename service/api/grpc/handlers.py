"""gRPC method handlers on raw bytes, over the call layer (service/calls/).

Handlers are registered with no request deserializer: the body arrives as bytes and is
parsed here, so a body that is not a valid message (or carries invalid UTF-8) is answered
INVALID_ARGUMENT, where grpcio's own deserialisation would answer UNKNOWN. Every call goes
through `CallLayer.serve`, which answers a `ServiceError` with its status and anything
else INTERNAL with a fixed message. Refusals set the status and return (`refuse`) instead
of raising through `context.abort`, so a refused body is freed at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, TypeVar

import grpc
from google.protobuf.message import DecodeError, Message
from prometheus_client import Counter

from attnserve.service.allocator import release_after
from attnserve.service.api.grpc.status import grpc_code
from attnserve.service.calls.call import Call, CallLayer
from attnserve.service.engine.core import Core
from attnserve.service.errors import InvalidArgument, ResourceExhausted, ServiceError
from attnserve.service.observe.propagation import extract_metadata

M = TypeVar("M", bound=Message)
REFUSAL_READ_SECONDS = 0.5
Context = grpc.aio.ServicerContext[bytes, bytes]
Handler = Callable[[M, Context, Call], Awaitable[bytes]]


def parse(message_type: type[M], raw: bytes) -> M:
    try:
        return message_type.FromString(raw)
    except DecodeError:
        raise InvalidArgument(
            f"request body is not a valid {message_type.DESCRIPTOR.full_name} message "
            "(corrupt protobuf or invalid UTF-8 in a string field)"
        ) from None


def to_bytes(message: Message) -> bytes:
    """A reply message serialized (handlers are registered with no response serializer)."""
    data: bytes = message.SerializeToString()
    return data


def refuse(context: Context, error: ServiceError) -> bytes:
    """Answer a call with `error`'s status without raising.

    `context.abort` keeps its AbortError on the call's state, and through the error's
    traceback the handler's frame, which holds the context (and so the call state) and the
    request body: a reference cycle per refused call that only the cyclic collector frees
    (docs/results/reliability.md, "Where the gaps were"). grpc sends the status set here and
    discards the (empty) reply of a unary call."""
    context.set_code(grpc_code(error.code))
    context.set_details(error.message)
    return b""


async def refuse_stream(requests: AsyncIterator[object], context: Context, error: ServiceError) -> None:
    """End a streaming call with `error` before serving it.

    The messages the client is still sending are read first (for at most
    REFUSAL_READ_SECONDS): ending the call while one is arriving makes grpc report INTERNAL
    ("Internal error from Core") to the client instead of `code` (docs/results/reliability.md)."""
    with contextlib.suppress(Exception):  # the time is up, or the client went away
        async with asyncio.timeout(REFUSAL_READ_SECONDS):
            async for _ in requests:
                pass
    refuse(context, error)


def deadline_of(context: Context) -> float | None:
    """The call's deadline as a time.monotonic() value (None when the client set none).

    grpc tells a handler only that its call was cancelled, and its copy of the deadline
    starts when the headers arrive, behind the client's: the call layer counts a
    cancellation close to this deadline as DEADLINE_EXCEEDED (docs/results/reliability.md,
    "Deadline vs cancellation")."""
    remaining = context.time_remaining()
    return None if remaining is None else time.monotonic() + remaining


def too_large(size: int, limit: int, setting: str) -> ServiceError | None:
    if size <= limit:
        return None
    return ResourceExhausted(f"request body: {size} bytes; the limit for this method is {limit} ({setting})")


class Handlers:
    """Builds the method handlers of one API (`api` is its metrics label)."""

    def __init__(self, core: Core, api: str) -> None:
        self.core = core
        self.api = api
        self.layer = CallLayer(core, api)
        self._received = core.metrics.api(api).received
        self._counted: set[int] = set()  # id() of the handlers of inference methods
        self._names: dict[int, list[str]] = {}  # id() of a handler -> its span name, set by service()

    def service(
        self, name: str, methods: dict[str, grpc.RpcMethodHandler[bytes, bytes]]
    ) -> grpc.GenericRpcHandler[bytes, bytes]:
        """The API's generic handler; counts inference calls as grpc looks them up."""
        table = {f"/{name}/{method}": handler for method, handler in methods.items()}
        for method, handler in methods.items():  # span names: <service>/<method>
            cell = self._names.get(id(handler))
            if cell is not None:
                cell[0] = f"{name}/{method}"
        return _Counting(table, self._counted, self._received)

    def unary(
        self, message_type: type[M], handler: Handler[M], *, counted: bool = True
    ) -> grpc.RpcMethodHandler[bytes, bytes]:
        """A unary handler. `counted` calls are inference calls: they go into the request
        metrics and take `max_message_bytes`; the others (metadata) take
        `max_metadata_message_bytes`. Every call takes its permit before its body is parsed."""
        settings = self.core.settings
        if counted:
            limit, setting = settings.max_message_bytes, "max_message_bytes"
        else:
            limit, setting = settings.max_metadata_message_bytes, "max_metadata_message_bytes"
        layer = self.layer
        span_name = [""]

        async def work(raw: bytes, context: Context, call: Call) -> bytes:
            layer.admit(call).hold(len(raw))  # the call's permit: taken here, released when it ends
            refused = too_large(len(raw), limit, setting)
            if refused is not None:
                raise refused
            return await handler(parse(message_type, raw), context, call)

        async def serve(raw: bytes, context: Context) -> bytes:
            # The caller's trace context is read only while tracing is on.
            parent = extract_metadata(context.invocation_metadata()) if layer.tracing is not None else None
            call = layer.start(
                deadline=deadline_of(context), counted=counted, name=span_name[0], parent=parent
            )
            size = len(raw)
            result = await layer.serve(call, partial(work, raw, context))
            del raw
            release_after(size)  # a large body's buffers go back to the system soon
            return result if isinstance(result, bytes) else refuse(context, result)

        method = grpc.unary_unary_rpc_method_handler(serve)
        self._names[id(method)] = span_name
        if counted:
            self._counted.add(id(method))
        return method

    def stream(
        self,
        message_type: type[M],
        handler: Handler[M],
        error_reply: Callable[[bytes, ServiceError], bytes],
    ) -> grpc.RpcMethodHandler[bytes, bytes]:
        """A bidirectional stream (see `streams.stream_handler`)."""
        from attnserve.service.api.grpc.streams import stream_handler

        span_name = [""]
        method = stream_handler(self, message_type, handler, error_reply, span_name)
        self._names[id(method)] = span_name
        self._counted.add(id(method))
        return method


if TYPE_CHECKING:
    GenericBase = grpc.GenericRpcHandler[bytes, bytes]
else:  # grpc's classes are not subscriptable at run time
    GenericBase = grpc.GenericRpcHandler


class _Counting(GenericBase):
    """grpc looks a call's handler up before it reads the body; a call cancelled from then
    on never reaches the handler, so it is counted here too (attnserve_requests_received)."""

    def __init__(
        self, table: dict[str, grpc.RpcMethodHandler[bytes, bytes]], counted: set[int], received: Counter
    ) -> None:
        self._table, self._counted, self._received = table, counted, received

    def service(
        self, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[bytes, bytes] | None:
        handler = self._table.get(handler_call_details.method)
        if handler is not None and id(handler) in self._counted:
            self._received.inc()
        return handler
