"""The HTTP port on the server's own event loop: uvicorn serving the app from a socket we
bind (SO_REUSEPORT with --workers N, as the gRPC port), over TLS/mTLS with the gRPC port's
certificate settings.

uvicorn's `Server.serve()` installs its own signal handlers; the one `Server` of the
process owns signals and the lifecycle, so only uvicorn's start-up, tick and shutdown
steps are used here.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import ssl

import uvicorn
from starlette.types import ASGIApp

from attnserve.service.ports import IN_USE, port_error
from attnserve.service.settings import Settings

log = logging.getLogger(__name__)
MAX_HEADER_BYTES = 64 * 1024


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


def _config(app: ASGIApp, settings: Settings) -> uvicorn.Config:
    tls: dict[str, object] = {}
    if settings.tls_cert is not None and settings.tls_key is not None:
        tls = {"ssl_certfile": str(settings.tls_cert), "ssl_keyfile": str(settings.tls_key)}
        if settings.tls_client_ca is not None:
            tls |= {"ssl_ca_certs": str(settings.tls_client_ca), "ssl_cert_reqs": ssl.CERT_REQUIRED}
    return uvicorn.Config(
        app,
        lifespan="off",
        log_config=None,
        access_log=False,
        server_header=False,
        ws="none",
        timeout_keep_alive=int(max(1, round(settings.http_keepalive_s))),
        timeout_graceful_shutdown=None,
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        **tls,  # type: ignore[arg-type]
    )


class HttpTransport:
    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.settings = settings
        self._config = _config(app, settings)
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
        self._server = server
        self._ticker = asyncio.get_running_loop().create_task(self._tick(server))
        return self.port

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
