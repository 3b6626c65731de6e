"""Bearer-token authentication of gRPC calls (`--auth`), checked by the call layer's tokens
(service/calls/auth.py).

Every call except `grpc.health.v1.Health` (orchestrator probes carry no secrets) must send
`authorization: Bearer <token>` metadata; the admin API needs an admin token. A method no
service declares stays UNIMPLEMENTED. Without `--auth` the handlers are not wrapped and
calls pay nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import grpc

from attnserve.service.api.grpc.wire import Context, refuse, refuse_stream
from attnserve.service.calls.auth import Authenticator, bearer_token, load_tokens
from attnserve.service.engine.metrics import Metrics
from attnserve.service.errors import ServiceError
from attnserve.service.settings import Settings

WHERE = "metadata 'authorization"
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
GenericHandler: TypeAlias = "grpc.GenericRpcHandler[Any, Any]"
if TYPE_CHECKING:
    GenericBase = grpc.GenericRpcHandler[Any, Any]
else:  # grpc's classes are not subscriptable at run time
    GenericBase = grpc.GenericRpcHandler


def bearer(metadata: Sequence[tuple[str, str | bytes]] | None) -> bytes:
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
    handlers: Sequence[GenericHandler], settings: Settings, metrics: Metrics, admin_services: Sequence[str]
) -> list[GenericHandler]:
    """`handlers` behind token checks when `settings.auth` (unchanged otherwise).

    The check runs inside grpc's synchronous handler lookup rather than in a
    grpc.aio.ServerInterceptor: an interceptor adds a coroutine round trip to every call
    (figures: docs/results/reliability.md, "Cost of the features on the call path")."""
    if not settings.auth:
        return list(handlers)
    guard = TokenGuard(Authenticator(load_tokens(settings), metrics, WHERE), admin_services)
    return [_Guarded(handler, guard) for handler in handlers]
