"""Bearer tokens on gRPC (`--auth`): reading a call's token from its metadata, and the guard of
the stock services that do not run through the call layer.

Every call except `grpc.health.v1.Health` (orchestrator probes carry no secrets) must send
`authorization: Bearer <token>` metadata; the admin API needs an admin token. attnserve's own
methods are checked by the call layer with their route (service/calls/call.py), as on HTTP;
the stock services beside them (server reflection, the admin API's answer while it is off)
are checked here while grpc looks their handler up. A method no service declares stays
UNIMPLEMENTED. Without `--auth` nothing is wrapped and calls pay nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import grpc

from attnserve.service.api.grpc.wire import Context, refuse, refuse_stream
from attnserve.service.calls.auth import Authenticator, Tokens, bearer_token
from attnserve.service.engine.metrics import Metrics
from attnserve.service.errors import ServiceError

WHERE = "metadata 'authorization"
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
GenericHandler: TypeAlias = "grpc.GenericRpcHandler[Any, Any]"
if TYPE_CHECKING:
    GenericBase = grpc.GenericRpcHandler[Any, Any]
else:  # grpc's classes are not subscriptable at run time
    GenericBase = grpc.GenericRpcHandler


def bearer(metadata: Iterable[tuple[str, str | bytes]] | None) -> bytes:
    for key, value in metadata or ():
        if key == "authorization" and isinstance(value, str):
            token = bearer_token(value)
            if token:
                return token
    return b""


def _refusal(handler: Handler, error: ServiceError) -> Handler:
    """A handler of the same kind as `handler` that answers `error` (the request is not parsed,
    and nothing keeps it: see `calls.refuse`)."""

    async def refuse_one(request: object, context: Context) -> None:
        del request
        refuse(context, error)

    async def refuse_streaming(requests: AsyncIterator[object], context: Context) -> None:
        await refuse_stream(requests, context, error)

    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(refuse_streaming)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(refuse_streaming)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(refuse_one)
    return grpc.unary_unary_rpc_method_handler(refuse_one)


class TokenGuard:
    """Checks the token of each call while grpc looks up its handler (see `guarded`)."""

    def __init__(self, authenticator: Authenticator, admin_services: Sequence[str]) -> None:
        self._authenticator = authenticator
        self._admin = tuple(f"/{name}/" for name in admin_services)

    def check(self, details: grpc.HandlerCallDetails, handler: Handler) -> Handler:
        admin = details.method.startswith(self._admin)
        error = self._authenticator.refusal(bearer(details.invocation_metadata), admin=admin)
        return handler if error is None else _refusal(handler, error)


class _Guarded(GenericBase):
    def __init__(self, inner: GenericHandler, guard: TokenGuard) -> None:
        self._inner, self._guard = inner, guard

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Handler | None:
        handler = self._inner.service(handler_call_details)
        return None if handler is None else self._guard.check(handler_call_details, handler)


def guarded(
    handlers: Sequence[GenericHandler], tokens: Tokens | None, metrics: Metrics
) -> list[GenericHandler]:
    """Stock `handlers` behind token checks when tokens are configured (unchanged otherwise).

    The check runs inside grpc's synchronous handler lookup rather than in a
    grpc.aio.ServerInterceptor: an interceptor adds a coroutine round trip to every call
    (figures: docs/results/reliability.md, "Cost of the features on the call path")."""
    if tokens is None:
        return list(handlers)
    guard = TokenGuard(Authenticator(tokens, metrics, WHERE), ())
    return [_Guarded(handler, guard) for handler in handlers]
