"""The `attnserve-serve` command (the client's is attnserve.service.client.cli)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from pydantic import ValidationError

from attnserve.service.observe.tracing import TracingConfig
from attnserve.service.run import configure_logging, run_server
from attnserve.service.settings import load_settings


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
    if settings.tracing:
        try:  # the OTEL_* variables it reads: a bad one stops start-up here, in one line
            TracingConfig.resolve(settings)
        except ValueError as exc:
            print(f"attnserve-serve: invalid tracing settings: {exc}", file=sys.stderr)
            return 2
    configure_logging(settings.log_level, settings.log_format)
    if settings.workers > 1:
        from attnserve.service.workers import supervise

        return supervise(settings)
    return run_server(settings)


if __name__ == "__main__":
    sys.exit(serve_main())
