"""Running one server process: logging set-up and the serve-until-signalled loop.

Shared by the `attnserve-serve` command and each worker process of `--workers N`.
"""

from __future__ import annotations

import asyncio
import logging

from attnserve.service.observe import logs as observe_logs
from attnserve.service.observe.settings import LogFormat
from attnserve.service.settings import Settings

log = logging.getLogger("attnserve")


def configure_logging(level: str, log_format: LogFormat = "text", worker: str = "") -> None:
    """Text or JSON lines on stderr; uvicorn's and grpc's loggers go through the same handler."""
    observe_logs.configure_logging(level, log_format, worker)


def run_server(
    settings: Settings, *, serve_metrics: bool | None = None, bind_after_load: bool = False
) -> int:
    """Serve until SIGTERM/SIGINT; 0 after a clean shutdown, 1 when start-up fails."""
    from attnserve.service.bundle import RepositoryError
    from attnserve.service.engine.models.loading import LoadError
    from attnserve.service.engine.models.runtime import DeviceError
    from attnserve.service.errors import StartupError
    from attnserve.service.server import Server

    try:
        asyncio.run(Server(settings, serve_metrics=serve_metrics, bind_after_load=bind_after_load).serve())
    except (RepositoryError, DeviceError, LoadError, StartupError, OSError) as exc:
        log.error("cannot start: %s", exc)
        return 1
    return 0
