"""`Server`: owns start-up, serving and shutdown of one server process.

Start-up: metrics endpoint, gRPC server listening with health NOT_SERVING, models loaded
(verified, warmed up, golden-checked), then health SERVING and calls admitted.

Shutdown (SIGTERM/SIGINT or `shutdown()`), within `grace_seconds`:
1. health NOT_SERVING at once (Watch streams see it); calls still admitted for
   `drain_accept_s`, so that calls sent before the signal and still queued inside grpc
   are served rather than refused;
2. new calls answered UNAVAILABLE until none arrives for a moment (at most 1 s);
3. the port closes and connections get GOAWAY (clients retrying now fail to connect, so
   the drain ends when the work does), while accepted calls finish and open streams
   answer what they read, then end UNAVAILABLE;
4. the sessions close.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from types import TracebackType
from typing import Protocol
from wsgiref.simple_server import WSGIServer

import grpc
from grpc_health.v1 import health_pb2
from prometheus_client import CollectorRegistry, start_http_server

from attnserve.service.api.grpc.admin import AdminApi, admin_off_handler
from attnserve.service.api.grpc.auth import guarded
from attnserve.service.api.grpc.handlers import one_lookup
from attnserve.service.api.grpc.native import NativeApi
from attnserve.service.api.grpc.stock import Health, health_handler, reflection_handler
from attnserve.service.api.grpc.transport import Stopper, bind, grpc_options
from attnserve.service.api.grpc.v2 import V2Api
from attnserve.service.api.http.app import build_app
from attnserve.service.api.http.transport import HttpTransport
from attnserve.service.api.native.plane import NativePlane
from attnserve.service.api.v2.plane import V2Plane
from attnserve.service.calls.auth import load_tokens
from attnserve.service.engine.admission import State
from attnserve.service.engine.core import Core
from attnserve.service.engine.metrics import Metrics
from attnserve.service.engine.models.reload import Reloader
from attnserve.service.engine.models.runtime import check_device
from attnserve.service.observe.tracing import Tracing
from attnserve.service.ports import metrics_port_error
from attnserve.service.settings import Settings

log = logging.getLogger(__name__)

HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
_FLUSH_SECONDS = 1.0  # after draining: time for replies to reach the wire and Watch streams to end
_QUIET_SECONDS = 0.2  # after draining: close the port once no call was refused for this long
_REFUSING_SECONDS = 1.0  # ... or after this long at most


class Api(Protocol):
    """A gRPC service on top of the core (attnserve.v1, the V2 inference protocol, ...)."""

    service_name: str

    def handler(self) -> grpc.GenericRpcHandler[bytes, bytes]: ...


class Server:
    """One server process. Use `async with Server(settings) as server:` or `await server.serve()`."""

    def __init__(
        self,
        settings: Settings,
        *,
        registry: CollectorRegistry | None = None,
        serve_metrics: bool | None = None,
        bind_after_load: bool = False,
    ) -> None:
        self.settings = settings
        self.registry = registry if registry is not None else CollectorRegistry()
        self.metrics = Metrics(self.registry)
        self.tracing = Tracing.from_settings(settings)
        self.core = Core(settings, self.metrics, self.tracing)
        # Each API's plane is built once and shared by both transports (one set of V2 statistics).
        self.native_plane = NativePlane(self.core)
        self.v2_plane = V2Plane(self.core)
        # Tokens are read once, here: the call layers of both transports check them per route.
        self.tokens = load_tokens(settings) if settings.auth else None
        tokens = self.tokens
        self.apis: list[Api] = [
            NativeApi(self.core, self.native_plane, tokens),
            V2Api(self.core, self.v2_plane, tokens),
        ]
        self.reloader = Reloader(settings, self.core.repository, self._model_health)
        self._admin = [AdminApi(self.core, self.reloader, tokens)] if settings.admin else []
        self.health = Health()
        self._serve_metrics = settings.metrics if serve_metrics is None else serve_metrics
        # A worker of --workers N shares its port: bound before its models are loaded, it
        # would take connections from the kernel only to answer UNAVAILABLE.
        self._bind_after_load = bind_after_load
        self._grpc: Stopper | None = None
        self._http: HttpTransport | None = None
        self.http_port = 0
        self._metrics_server: WSGIServer | None = None
        self._stop_requested = asyncio.Event()
        self._stopped = False
        self.port = 0
        self.metrics_port = 0

    # --- lifecycle ----------------------------------------------------------------------
    async def start(self) -> None:
        """Listen, load the models, then report SERVING. Raises if nothing can be served."""
        try:
            if self._bind_after_load:
                await self.load()
                await self.listen()
            else:
                await self.listen()
                await self.load()
        except BaseException:
            await self._close_transport(0)
            await self.core.repository.close()
            self._stop_tracing()
            raise

    async def listen(self) -> None:
        """Open the metrics and gRPC ports with health NOT_SERVING (calls get UNAVAILABLE)."""
        settings = self.settings
        check_device(settings)
        if self._serve_metrics:
            try:
                httpd, _ = start_http_server(settings.metrics_port, settings.metrics_bind_host, self.registry)
            except OSError as exc:
                raise metrics_port_error(settings, exc) from None
            self._metrics_server = httpd
            self.metrics_port = int(httpd.server_port)
        names = [api.service_name for api in self.apis]
        admin = [api.service_name for api in self._admin]
        # tokens: their call layers; the APIs' services answer from one table
        handlers = [one_lookup([api.handler() for api in self.apis]), *(api.handler() for api in self._admin)]
        stock = [] if self._admin else [admin_off_handler()]
        if settings.reflection:
            stock.append(reflection_handler([*names, *admin, HEALTH_SERVICE]))
        server = grpc.aio.server(options=grpc_options(settings))
        server.add_generic_rpc_handlers((*handlers, *guarded(stock, self.tokens, self.metrics)))
        server.add_generic_rpc_handlers((health_handler(self.health),))  # open: probes carry no token
        self.port = bind(server, settings)
        await server.start()
        self._grpc = Stopper(server)
        if self.core.gate.state is State.STARTING:
            for name in ("", *names):
                await self.health.set(name, NOT_SERVING)
            log.info("listening on %s:%d (not serving until the models are loaded)", settings.host, self.port)
        else:
            log.info("listening on %s:%d", settings.host, self.port)
        if settings.http_port:
            await self._listen_http()
        if self._metrics_server is not None:
            log.info("metrics on http://%s:%d/metrics", settings.metrics_bind_host, self.metrics_port)

    async def _listen_http(self) -> None:
        """The HTTP port: V2 REST and the JSON API on the same core (and V2 statistics) as gRPC."""
        app = build_app(self.core, self.tokens, self.native_plane, self.v2_plane)
        http = HttpTransport(app, self.settings)
        self.http_port = await http.start()
        self._http = http
        log.info("HTTP on %s://%s:%d (explorer at /)", http.scheme, self.settings.host, self.http_port)

    async def load(self) -> None:
        """Load every model, then admit calls."""
        started = time.perf_counter()
        disk = await self.reloader.disk()  # read first: a change during loading is seen later
        await self.core.repository.load_all()
        self.reloader.prime(disk)
        for name in self.core.repository.models:
            await self.health.set(name, SERVING)
        for name in ("", *(api.service_name for api in self.apis)):
            await self.health.set(name, SERVING)
        self.core.gate.state = State.SERVING
        self.reloader.start()
        log.info(
            "ready in %.1fs: %d model(s)%s",
            time.perf_counter() - started,
            len(self.core.repository.models),
            f" on port {self.port}" if self.port else "",
        )

    async def shutdown(self, grace: float | None = None) -> None:
        """Drain and stop; safe to call more than once (the steps: module docstring)."""
        if self._stopped:
            return
        self._stopped = True
        grace = self.settings.grace_seconds if grace is None else grace
        deadline = time.monotonic() + grace
        gate = self.core.gate
        await self.health.enter_graceful_shutdown()
        # grpc hands the event loop one received call at a time: under load, calls sent
        # before the signal are still queued inside grpc. They are admitted for a moment.
        await asyncio.sleep(min(self.settings.drain_accept_s, grace))
        gate.drain()
        log.info("shutting down: %d call(s) in progress, grace %.1fs", gate.active, grace)
        await self.reloader.stop(grace)
        # Calls queued in grpc when the port closes are cancelled by it: refuse them with
        # UNAVAILABLE first, until none arrives, for at most _REFUSING_SECONDS (clients that
        # keep retrying would otherwise hold the port open for the whole grace period).
        await gate.wait_quiet(_QUIET_SECONDS, min(deadline, time.monotonic() + _REFUSING_SECONDS))
        closing = asyncio.ensure_future(self._stop_grpc(max(0.0, deadline - time.monotonic())))
        # Only while calls are in progress: with no grace left, wait_for times out before the
        # wait has run even once, and would report 0 calls cut off.
        if gate.active:
            try:
                await asyncio.wait_for(gate.wait_idle(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                log.warning("grace period over with %d call(s) unfinished; cancelling them", gate.active)
        # Replies handed to grpc reach the wire; then streams no call waits for (health
        # Watch) are ended.
        await self._stop_grpc(min(_FLUSH_SECONDS, max(0.0, deadline - time.monotonic())))
        await closing
        await self._close_transport(0)
        await self.core.repository.close()
        self._stop_tracing()
        log.info("stopped")

    def _stop_tracing(self) -> None:
        if self.tracing is not None:
            self.tracing.shutdown()  # exports the spans still buffered, stops the exporter thread

    async def _stop_grpc(self, grace: float) -> None:
        """Close the port and send GOAWAY; calls in progress get `grace` seconds (a second
        call shortens the first one's grace). The HTTP port closes at the same moment: its
        calls in progress finish, idle keep-alive connections are closed."""
        stops = [self._grpc.stop(grace)] if self._grpc is not None else []
        if self._http is not None:
            http, self._http = self._http, None
            stops.append(http.stop(grace))
        await asyncio.gather(*stops)

    async def _model_health(self, name: str, serving: bool) -> None:
        """Follow a model loaded or unloaded while serving."""
        if not self._stopped:
            await self.health.set(name, SERVING if serving else NOT_SERVING)

    async def _close_transport(self, grace: float) -> None:
        if self._http is not None:
            http, self._http = self._http, None
            await http.stop(grace)
        if self._grpc is not None:
            await self._grpc.stop(grace)
            self._grpc = None
        if self._metrics_server is not None:
            httpd = self._metrics_server
            self._metrics_server = None
            await asyncio.get_running_loop().run_in_executor(None, _stop_metrics_server, httpd)

    def request_stop(self) -> None:
        """Ask `serve()` to shut down (signal handlers call this)."""
        self._stop_requested.set()

    async def serve(self) -> None:
        """Start, serve until SIGTERM/SIGINT (or `request_stop()`), then shut down."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        try:
            await self.start()
            await self._stop_requested.wait()
            await self.shutdown()
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)

    async def __aenter__(self) -> Server:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.shutdown()

    @property
    def target(self) -> str:
        host = "127.0.0.1" if self.settings.host in ("0.0.0.0", "::", "[::]") else self.settings.host
        return f"{host}:{self.port}"


def _stop_metrics_server(httpd: WSGIServer) -> None:
    with contextlib.suppress(OSError):
        httpd.shutdown()
        httpd.server_close()
