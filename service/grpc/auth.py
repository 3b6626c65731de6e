"""Bearer-token authentication of gRPC calls (`--auth`).

Every call except `grpc.health.v1.Health` (orchestrator probes carry no secrets) must send
`authorization: Bearer <token>` metadata. An inference token may call everything but the
admin API; an admin token may call everything. A missing or unknown token is answered
UNAUTHENTICATED, an inference token on the admin API PERMISSION_DENIED, each counted in
`attnserve_auth_failures_total{code}`; a method no service declares stays UNIMPLEMENTED.

Tokens come from `--auth-tokens-file` (one `<role> <token>` per line, `#` comments) and
from the ATTNSERVE_INFERENCE_TOKENS / ATTNSERVE_ADMIN_TOKENS environment variables
(comma-separated), never from flags, which any user of the machine can read. A presented
token is compared with every configured one by `hmac.compare_digest`, so the time taken
does not tell how much of it matched. Without `--auth` the handlers are not wrapped and
calls pay nothing.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import grpc

from attnserve.service.engine.metrics import Metrics
from attnserve.service.errors import ServiceError, StartupError, Status
from attnserve.service.grpc.calls import Context, refuse, refuse_stream
from attnserve.service.settings import Settings

INFERENCE, ADMIN = "inference", "admin"
ROLES = (INFERENCE, ADMIN)
ENVIRONMENT = {INFERENCE: "ATTNSERVE_INFERENCE_TOKENS", ADMIN: "ATTNSERVE_ADMIN_TOKENS"}
MIN_TOKEN_CHARS = 16
UNAUTHENTICATED_MESSAGE = (
    "authentication: missing or unknown token; send metadata 'authorization: Bearer <token>'"
)
DENIED_MESSAGE = "authorization: this method needs an admin token"

Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
GenericHandler: TypeAlias = "grpc.GenericRpcHandler[Any, Any]"
if TYPE_CHECKING:
    GenericBase = grpc.GenericRpcHandler[Any, Any]
else:  # grpc's classes are not subscriptable at run time
    GenericBase = grpc.GenericRpcHandler


@dataclass(frozen=True)
class Tokens:
    entries: tuple[tuple[bytes, str], ...]  # (token, role)

    def role_of(self, presented: bytes) -> str | None:
        role = None
        for token, token_role in self.entries:  # no early exit: every token is compared
            if hmac.compare_digest(presented, token):
                role = token_role
        return role


def _add(found: dict[str, str], token: str, role: str, where: str) -> None:
    if role not in ROLES:
        raise StartupError(f"{where}: unknown role {role!r}; roles are {', '.join(ROLES)}")
    if len(token) < MIN_TOKEN_CHARS or not token.isascii() or not token.isprintable() or " " in token:
        raise StartupError(
            f"{where}: a {role} token must be at least {MIN_TOKEN_CHARS} printable ASCII characters "
            "without spaces"
        )
    if found.get(token, role) != role:
        raise StartupError(f"{where}: the same token is listed with two roles")
    found[token] = role


def load_tokens(settings: Settings, environ: Mapping[str, str] = os.environ) -> Tokens:
    """The configured tokens; StartupError names the problem (never the token)."""
    found: dict[str, str] = {}
    path = settings.auth_tokens_file
    if path is not None:
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise StartupError(f"--auth-tokens-file: cannot read {path}: {exc}") from None
        for number, line in enumerate(lines, 1):
            fields = line.split("#", 1)[0].split()
            if not fields:
                continue
            if len(fields) != 2:
                raise StartupError(f"{path} line {number}: expected '<role> <token>'")
            _add(found, fields[1], fields[0], f"{path} line {number}")
    for role, variable in ENVIRONMENT.items():
        for token in environ.get(variable, "").split(","):
            if token.strip():
                _add(found, token.strip(), role, variable)
    if not found:
        raise StartupError(
            "auth is on but no token is configured: set --auth-tokens-file, "
            f"{ENVIRONMENT[INFERENCE]} or {ENVIRONMENT[ADMIN]}"
        )
    return Tokens(tuple((token.encode(), role) for token, role in found.items()))


def bearer(metadata: Sequence[tuple[str, str | bytes]] | None) -> bytes:
    for key, value in metadata or ():
        if key == "authorization" and isinstance(value, str):
            scheme, _, token = value.strip().partition(" ")
            if scheme.lower() == "bearer":
                return token.strip().encode()
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

    def __init__(self, tokens: Tokens, admin_services: Sequence[str], metrics: Metrics) -> None:
        self._tokens = tokens
        self._admin = tuple(f"/{name}/" for name in admin_services)
        codes = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)
        self._failures = {code: metrics.auth_failures.labels(code.name) for code in codes}
        for child in self._failures.values():
            child.inc(0)

    def check(self, details: grpc.HandlerCallDetails, handler: Handler) -> Handler:
        role = self._tokens.role_of(bearer(details.invocation_metadata))
        if role is None:
            code, message = grpc.StatusCode.UNAUTHENTICATED, UNAUTHENTICATED_MESSAGE
        elif role != ADMIN and details.method.startswith(self._admin):
            code, message = grpc.StatusCode.PERMISSION_DENIED, DENIED_MESSAGE
        else:
            return handler
        self._failures[code].inc()
        return _refusal(handler, ServiceError(message, Status[code.name]))


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
    (measured: ~0.2 ms of server CPU per call, a fifth of a call's cost here)."""
    if not settings.auth:
        return list(handlers)
    guard = TokenGuard(load_tokens(settings), admin_services, metrics)
    return [_Guarded(handler, guard) for handler in handlers]
