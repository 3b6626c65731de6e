"""Running one server process: logging set-up and the serve-until-signalled loop.

Shared by the `attnserve-serve` command and each worker process of `--workers N`.
"""

from __future__ import annotations

import asyncio
import logging
import sys

from attnserve.service.settings import Settings

log = logging.getLogger("attnserve")


def configure_logging(level: str, prefix: str = "") -> None:
    logging.basicConfig(
        level=level.upper(),
        format=f"%(asctime)s {prefix}%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
        force=True,
    )


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
