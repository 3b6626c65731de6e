"""gRPC method handlers on raw bytes, over the call layer (service/calls/).

Handlers are registered with no request deserializer: the body arrives as bytes and is
parsed here, so a body that is not a valid message (or carries invalid UTF-8) is answered
INVALID_ARGUMENT, where grpcio's own deserialisation would answer UNKNOWN. Each method is
registered with its route (service/calls/route.py: counted, gated, its size limit) and every
call goes through `CallLayer.serve`, which applies the route and answers a `ServiceError`
with its status and anything else INTERNAL with a fixed message. Refusals set the status and
return (wire.refuse) instead of raising through `context.abort`, so a refused body is freed
at once.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

import grpc
from prometheus_client import Counter

from attnserve.service.api.grpc.auth import WHERE, bearer
from attnserve.service.api.grpc.streams import stream_handler
from attnserve.service.api.grpc.wire import Context, Handler, M, answer, parsed
from attnserve.service.calls.auth import Authenticator, Tokens
from attnserve.service.calls.call import CallLayer
from attnserve.service.calls.route import Route, grpc_routes
from attnserve.service.engine.core import Core
from attnserve.service.errors import ServiceError
from attnserve.service.observe.propagation import extract_metadata


class Handlers:
    """Builds the method handlers of one protocol's gRPC service ("native" or "v2")."""

    def __init__(self, core: Core, protocol: str, tokens: Tokens | None = None) -> None:
        self.core = core
        auth = None if tokens is None else Authenticator(tokens, core.metrics, WHERE)
        self.layer = CallLayer(core, protocol, "grpc", auth)
        self.routes = grpc_routes(core.settings)
        self._received = core.metrics.api(protocol, "grpc").received
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
        received = self._received
        return _Counting(
            {path: (h, received if id(h) in self._counted else None) for path, h in table.items()}
        )

    def unary(
        self, message_type: type[M], handler: Handler[M], route: Route | None = None
    ) -> grpc.RpcMethodHandler[bytes, bytes]:
        """A unary handler on `route` (default: inference). The call layer takes the permit
        and checks the body's size before the body is parsed (wire.parsed)."""
        route = route or self.routes.inference
        layer = self.layer
        span_name = [""]

        async def serve(raw: bytes, context: Context) -> bytes:
            # The caller's trace context and token are read only where tracing and tokens are on.
            parent = extract_metadata(context.invocation_metadata()) if layer.tracing is not None else None
            token = bearer(context.invocation_metadata()) if layer.auth is not None else b""
            work = partial(parsed, message_type, handler, raw, context)
            # grpc's copy of the deadline starts when the headers arrive, behind the client's: the
            # call layer counts a cancellation close to it as DEADLINE_EXCEEDED.
            timeout = context.time_remaining()
            result = await layer.serve(
                route, work, timeout=timeout, name=span_name[0], parent=parent, size=len(raw), token=token
            )
            del raw, work
            return await answer(context, result)

        method = grpc.unary_unary_rpc_method_handler(serve)
        self._names[id(method)] = span_name
        if route.counted:
            self._counted.add(id(method))
        return method

    def stream(
        self,
        message_type: type[M],
        handler: Handler[M],
        error_reply: Callable[[bytes, ServiceError], bytes],
    ) -> grpc.RpcMethodHandler[bytes, bytes]:
        """A bidirectional stream (see `streams.stream_handler`)."""
        span_name = [""]
        method = stream_handler(self.layer, self.routes, message_type, handler, error_reply, span_name)
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

    def __init__(self, table: dict[str, tuple[grpc.RpcMethodHandler[bytes, bytes], Counter | None]]) -> None:
        self._table = table  # method path -> (its handler, the counter of an inference method)

    def service(
        self, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[bytes, bytes] | None:
        entry = self._table.get(handler_call_details.method)
        if entry is None:
            return None
        handler, received = entry
        if received is not None:
            received.inc()
        return handler


def one_lookup(services: list[grpc.GenericRpcHandler[bytes, bytes]]) -> grpc.GenericRpcHandler[bytes, bytes]:
    """The services of `Handlers.service` as one generic handler: grpc asks each generic
    handler of a port in turn, so a call to the last service would pay one miss per service
    before it."""
    table: dict[str, tuple[grpc.RpcMethodHandler[bytes, bytes], Counter | None]] = {}
    for service in services:
        if not isinstance(service, _Counting):
            raise TypeError(f"not a service of Handlers.service: {service!r}")
        table.update(service._table)
    return _Counting(table)
