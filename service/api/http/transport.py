"""The HTTP port on the server's own event loop: uvicorn serving the app from a socket we
bind (SO_REUSEPORT with --workers N, as the gRPC port), over TLS/mTLS with the gRPC port's
certificate settings, behind the connection bounds of `BoundedHttp`; uvicorn writes the
security headers every reply carries (`SECURITY_HEADERS`).

uvicorn's `Server.serve()` installs its own signal handlers; the one `Server` of the
process owns signals and the lifecycle, so only uvicorn's start-up, tick and shutdown
steps are used here.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import logging
import socket
import ssl
from dataclasses import dataclass
from typing import Any, cast

import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from attnserve.service.allocator import release_after
from attnserve.service.ports import IN_USE, port_error
from attnserve.service.settings import Settings

log = logging.getLogger(__name__)
MAX_HEADER_BYTES = 64 * 1024
MAX_CONNECTIONS = 1024
# Every reply's security headers, written by uvicorn with its own: the explorer and the docs
# page load only their own files (no CDN, no inline script).
SECURITY_HEADERS = [
    ("x-content-type-options", "nosniff"),
    ("content-security-policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'"),
    ("referrer-policy", "no-referrer"),
]


@dataclass(frozen=True)
class HttpLimits:
    """What one connection may cost before it has sent a whole request head."""

    max_header_bytes: int = MAX_HEADER_BYTES  # request line and headers together
    header_timeout_s: float = 10.0  # from opening (or the last reply) to a complete head
    max_connections: int = MAX_CONNECTIONS  # open at once, per process

    @classmethod
    def of(cls, settings: Settings) -> HttpLimits:
        return cls(header_timeout_s=settings.http_read_timeout_s)


def _reply(status: bytes, text: bytes) -> bytes:
    return (
        b"HTTP/1.1 " + status + b"\r\ncontent-type: text/plain; charset=utf-8\r\n"
        b"content-length: " + str(len(text)).encode() + b"\r\nconnection: close\r\n\r\n" + text
    )


HEAD_TOO_LARGE = _reply(b"431 Request Header Fields Too Large", b"request headers over the limit\n")
HEAD_TIMEOUT = _reply(b"408 Request Timeout", b"request headers not received in time\n")
BUSY = _reply(b"503 Service Unavailable", b"too many connections; retry shortly\n")


async def _head_too_large(scope: Scope, receive: Receive, send: Send) -> None:
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"connection", b"close")]
    await send({"type": "http.response.start", "status": 431, "headers": headers})
    await send({"type": "http.response.body", "body": b"request headers over the limit\n"})


class BoundedHttp(HttpToolsProtocol):
    """uvicorn's httptools protocol with the bounds it lacks.

    httptools has no header size limit (uvicorn's h11 limit does not apply to it) and
    uvicorn no header timeout, so a client could send megabytes of headers, or trickle
    them a line at a time and hold a connection forever. Here a request head over
    `max_header_bytes` is answered 431, a connection that has not sent a whole head within
    `header_timeout_s` of opening (or of its last reply) is closed (408 if it started one),
    and past `max_connections` the connection idle the longest (no request in progress) is
    closed to make room, so slow clients cannot lock out a normal one. After a large body
    the heap is trimmed (`allocator`)."""

    def __init__(
        self,
        *args: Any,
        limits: HttpLimits,
        idle: dict[BoundedHttp, None],
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._limits = limits
        self._idle = idle  # shared by the server's connections; insertion order = idle the longest first
        self._head_bytes: int | None = 0  # bytes of the request head so far; None inside a request
        self._in_body = False  # between a head and the end of its body (which may outlast the reply)
        self._head_started = False
        self._heads = 0  # request heads parsed on this connection
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_bytes = 0

    # --- connection -------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._wait_for_head()
        if len(self.connections) > self._limits.max_connections:
            victim = next((c for c in self._idle if c is not self), None)
            if victim is None:  # every other connection is mid-request: this one waits its turn elsewhere
                transport.write(BUSY)
                transport.close()
            else:
                victim._close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        super().connection_lost(exc)

    def _close(self, reply: bytes = b"") -> None:
        self._stop_waiting()
        if not self.transport.is_closing():
            if reply:
                self.transport.write(reply)
            self.transport.close()

    def _wait_for_head(self) -> None:
        self._idle[self] = None
        self._head_bytes, self._head_started = 0, False
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self._limits.header_timeout_s, self._head_timeout)

    def _stop_waiting(self) -> None:
        self._idle.pop(self, None)
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timeout(self) -> None:
        self._head_timer = None
        self._close(HEAD_TIMEOUT if self._head_started else b"")

    # --- parsing ----------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        reading_head = self._head_bytes is not None and not self._in_body
        heads = self._heads
        super().data_received(data)
        # A head still incomplete after this chunk: count it (a chunk is at most 256 KiB, so
        # the parser never holds more than that over the limit). A head completed inside
        # the chunk is measured exactly in on_headers_complete, even where its whole request
        # (body included) ended in the chunk too.
        if reading_head and heads == self._heads and self._head_bytes is not None and not self._in_body:
            self._head_bytes += len(data)
            if self._head_bytes > self._limits.max_header_bytes:
                self._close(HEAD_TOO_LARGE)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_started = True
        self._body_bytes = 0

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        super().on_body(body)

    def on_headers_complete(self) -> None:
        self._heads += 1
        self._stop_waiting()
        self._head_bytes, self._in_body = None, True
        size = len(self.url)
        for name, value in self.headers:  # a loop, not a generator: no call per header
            size += len(name) + len(value) + 4
        if size <= self._limits.max_header_bytes:
            super().on_headers_complete()
            return
        # uvicorn runs self.app for this request; the URL is not parsed (httptools refuses
        # one over 64 KiB with a bare 400)
        app, self.app, self.url = self.app, _head_too_large, b"/"
        try:
            super().on_headers_complete()
        finally:
            self.app = app

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._head_bytes, self._in_body = 0, False  # what follows is the next request's head

    def on_response_complete(self) -> None:
        super().on_response_complete()
        release_after(self._body_bytes)  # a large body's buffers go back to the system
        if self.timeout_keep_alive_task is not None:  # uvicorn armed its idle timer: no request in progress
            self._wait_for_head()


def _socket(settings: Settings) -> socket.socket:
    host = settings.host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP: asyncio sets TCP_NODELAY on accepted sockets only when the listener says
    # TCP; without it a reply's header and body writes wait out the peer's delayed ACK (~40 ms).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if settings.workers > 1:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, settings.http_port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        reason = IN_USE if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
        raise port_error("the HTTP port", settings.host, settings.http_port, "--http-port", reason) from None
    sock.setblocking(False)
    return sock


def _config(app: ASGIApp, settings: Settings, limits: HttpLimits) -> uvicorn.Config:
    tls: dict[str, object] = {}
    if settings.tls_cert is not None and settings.tls_key is not None:
        tls = {"ssl_certfile": str(settings.tls_cert), "ssl_keyfile": str(settings.tls_key)}
        if settings.tls_client_ca is not None:
            tls |= {"ssl_ca_certs": str(settings.tls_client_ca), "ssl_cert_reqs": ssl.CERT_REQUIRED}
    protocol = functools.partial(BoundedHttp, limits=limits, idle={})
    return uvicorn.Config(
        app,
        http=cast("type[asyncio.Protocol]", protocol),  # uvicorn calls it with config, server_state, ...
        lifespan="off",
        log_config=None,
        access_log=False,
        server_header=False,
        headers=SECURITY_HEADERS,
        ws="none",
        timeout_keep_alive=int(max(1, round(settings.http_keepalive_s))),
        timeout_graceful_shutdown=None,
        **tls,  # type: ignore[arg-type]
    )


class HttpTransport:
    def __init__(self, app: ASGIApp, settings: Settings, limits: HttpLimits | None = None) -> None:
        self.settings = settings
        self.limits = limits or HttpLimits.of(settings)
        self._config = _config(app, settings, self.limits)
        self._server: uvicorn.Server | None = None
        self._ticker: asyncio.Task[None] | None = None
        self.port = 0

    @property
    def scheme(self) -> str:
        return "https" if self.settings.tls_cert is not None else "http"

    async def start(self) -> int:
        sock = _socket(self.settings)
        self.port = int(sock.getsockname()[1])
        config = self._config
        config.load()
        server = uvicorn.Server(config)
        server.lifespan = config.lifespan_class(config)
        await server.startup(sockets=[sock])
        if server.should_exit:  # uvicorn reports a start-up failure this way, after logging it
            raise OSError(f"cannot serve HTTP on port {self.port}")
        # The default headers (date, security) from the first reply on: the tick sets them only
        # once a second, as uvicorn's own main loop does after its first tick.
        await server.on_tick(0)
        self._server = server
        self._ticker = asyncio.get_running_loop().create_task(self._tick(server))
        return self.port

    @property
    def connections(self) -> int:
        return 0 if self._server is None else len(self._server.server_state.connections)

    @staticmethod
    async def _tick(server: uvicorn.Server) -> None:
        # uvicorn's main loop refreshes the cached Date header once a second.
        counter = 0
        while not server.should_exit:
            await asyncio.sleep(0.1)
            counter = (counter + 1) % 864000
            await server.on_tick(counter)

    async def stop(self, grace: float) -> None:
        """Stop listening, let answered replies flush, close idle connections (within `grace`)."""
        server, self._server = self._server, None
        if server is None:
            return
        server.should_exit = True
        if self._ticker is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        try:
            await asyncio.wait_for(server.shutdown(), max(grace, 0.1))
        except TimeoutError:
            log.warning("HTTP connections still open after %.1fs; closing them", grace)
            for connection in list(server.server_state.connections):
                connection.shutdown()
