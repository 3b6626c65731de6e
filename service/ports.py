"""Start-up errors for a port the server cannot listen on, naming the address and the flag.

grpc reports a failed bind as "Failed to bind to address" without the reason, and Python's
servers as "[Errno 98] Address already in use" without the address; both leave the user
guessing which of the server's ports is taken.
"""

from __future__ import annotations

import errno
import socket

from attnserve.service.errors import StartupError
from attnserve.service.settings import Settings

IN_USE = "the port is already in use (by another server, or a `make serve` still running?)"


def _reason(host: str, port: int) -> str:
    """Why (host, port) cannot be bound, found by trying it with a plain socket."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((host.strip("[]"), port))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return IN_USE
        return exc.strerror or str(exc)
    return "the address cannot be listened on"


def port_error(what: str, host: str, port: int, flag: str, reason: str | None = None) -> StartupError:
    """`what` (e.g. "the gRPC port") could not listen on host:port; `flag` picks another."""
    why = reason or _reason(host, port)
    return StartupError(f"cannot listen on {host}:{port} ({what}): {why}; choose another with {flag}")


def metrics_port_error(settings: Settings, exc: OSError) -> StartupError:
    """The /metrics server's bind failed with `exc` (its message names no address)."""
    reason = IN_USE if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
    return port_error(
        "the metrics port",
        settings.metrics_bind_host,
        settings.metrics_port,
        "--metrics-port (0 picks a free port; --no-metrics turns it off)",
        reason,
    )
