"""Console scripts: `attnserve-serve` (the server) and `attnserve-client` (call it)."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Sequence

from attnserve.service.client_cli import client_main
from attnserve.service.settings import Settings, load_settings
from pydantic import ValidationError

__all__ = ["client_main", "configure_logging", "run_server", "serve_main"]

log = logging.getLogger("attnserve")


def configure_logging(level: str, prefix: str = "") -> None:
    logging.basicConfig(
        level=level.upper(),
        format=f"%(asctime)s {prefix}%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
        force=True,
    )


def run_server(settings: Settings, *, serve_metrics: bool | None = None) -> int:
    """Serve until SIGTERM/SIGINT; 0 after a clean shutdown, 1 when start-up fails."""
    from attnserve.service.errors import StartupError
    from attnserve.service.model import LoadError
    from attnserve.service.repository import RepositoryError
    from attnserve.service.runtime import DeviceError
    from attnserve.service.server import Server

    try:
        asyncio.run(Server(settings, serve_metrics=serve_metrics).serve())
    except (RepositoryError, DeviceError, LoadError, StartupError, OSError) as exc:
        log.error("cannot start: %s", exc)
        return 1
    return 0


def serve_main(argv: Sequence[str] | None = None) -> int:
    # grpc core logs connection events (GOAWAY on every shutdown) at INFO; keep its errors only.
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    try:
        settings = load_settings(argv)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg']}" for e in exc.errors()
        )
        print(f"attnserve-serve: invalid settings: {problems}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level)
    if settings.workers > 1:
        from attnserve.service.workers import supervise

        return supervise(settings)
    return run_server(settings)


if __name__ == "__main__":
    sys.exit(serve_main())
