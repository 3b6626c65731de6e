"""The gRPC port: server options (message limit, SO_REUSEPORT, keepalive) and binding it
(over TLS when configured). The stock health and reflection services are in `stock`.

Keepalive (docs/reliability.md): the server pings a connection after `keepalive_time_s`
without activity and closes it when the ping is not answered within
`keepalive_timeout_s`, so dead peers behind NATs and load balancers are found. Clients may
ping too, at most once per `min_client_ping_interval_s` while no data flows (and, with
`keepalive_permit_without_calls`, on idle connections); every faster ping is a strike, and
after `max_ping_strikes` strikes that one connection gets GOAWAY `too_many_pings` while
every other connection carries on.

Connections that never speak (docs/reliability.md): the handshake must complete within
`handshake_timeout_s`; a connection with no call in progress is closed after
`max_connection_idle_s`; every connection after `max_connection_age_s` (+ grace) when set;
and one connection carries at most `max_concurrent_streams` calls at once, so each
connection's buffered request bodies are bounded by that times `max_message_bytes`.
"""

from __future__ import annotations

import asyncio
import math

import grpc

from attnserve.service.api.grpc.tls import server_credentials
from attnserve.service.ports import port_error
from attnserve.service.settings import Settings


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def _connection_options(settings: Settings) -> list[tuple[str, int]]:
    options = [
        ("grpc.server_handshake_timeout_ms", _ms(settings.handshake_timeout_s)),
        ("grpc.max_concurrent_streams", settings.max_concurrent_streams),
    ]
    if settings.max_connection_idle_s:
        options.append(("grpc.max_connection_idle_ms", _ms(settings.max_connection_idle_s)))
    if settings.max_connection_age_s:
        options.append(("grpc.max_connection_age_ms", _ms(settings.max_connection_age_s)))
        options.append(("grpc.max_connection_age_grace_ms", _ms(settings.max_connection_age_grace_s)))
    return options


def grpc_options(settings: Settings) -> list[tuple[str, int]]:
    return [
        *_connection_options(settings),
        ("grpc.max_receive_message_length", settings.max_message_bytes),
        ("grpc.so_reuseport", 1 if settings.workers > 1 else 0),
        ("grpc.keepalive_time_ms", _ms(settings.keepalive_time_s)),
        ("grpc.keepalive_timeout_ms", _ms(settings.keepalive_timeout_s)),
        ("grpc.keepalive_permit_without_calls", int(settings.keepalive_permit_without_calls)),
        # grpc's default stops the server's own keepalive pings after 2 without data.
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.http2.min_ping_interval_without_data_ms", _ms(settings.min_client_ping_interval_s)),
        ("grpc.http2.max_ping_strikes", settings.max_ping_strikes),
    ]


def bind(server: grpc.aio.Server, settings: Settings) -> int:
    """Listen on `settings.host:settings.port` (TLS when configured); returns the port."""
    address = f"{settings.host}:{settings.port}"
    credentials = server_credentials(settings)
    try:
        if credentials is None:
            port = server.add_insecure_port(address)
        else:
            port = server.add_secure_port(address, credentials)
    except RuntimeError:  # grpc's "Failed to bind to address", without the reason
        port = 0
    if port == 0:
        raise port_error("the gRPC port", settings.host, settings.port, "--port (0 picks a free port)")
    return port


class Stopper:
    """`grpc.aio.Server.stop` for callers that overlap (the shutdown closes the port, then
    shortens the grace to flush replies): a call whose grace is not shorter than the one in
    progress waits on that one instead of stopping again. grpcio 1.85 ends the process with
    SIGSEGV when two `stop(0)` calls overlap; it documents overlapping calls as allowed."""

    def __init__(self, server: grpc.aio.Server) -> None:
        self._server = server
        self._grace = math.inf
        self._stopping: asyncio.Future[None] | None = None

    async def stop(self, grace: float) -> None:
        if self._stopping is None or grace < self._grace:
            self._grace = grace
            self._stopping = asyncio.ensure_future(self._server.stop(grace))
        # shielded: a cancelled caller must not cancel a stop that others wait on
        await asyncio.shield(self._stopping)
