"""`--workers N`: N server processes sharing one port, the way a Python server uses N cores.

The supervisor starts N worker processes (`python -m attnserve.service.workers SETTINGS_JSON`), each
a full `Server` with its own models, batchers and sessions, all bound to the same port
with SO_REUSEPORT (the kernel spreads connections over them). Metrics are written by the
workers into prometheus_client's multiprocess directory and served, summed, by the
supervisor on the metrics port. SIGTERM/SIGINT are forwarded; each worker drains as a
single server would. If a worker dies on its own the others are stopped and the
supervisor exits non-zero, so the process manager restarts the whole set.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from types import FrameType
from wsgiref.simple_server import WSGIServer

from attnserve.service.settings import Settings

log = logging.getLogger(__name__)
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def _start_metrics(settings: Settings, directory: str) -> WSGIServer:
    from prometheus_client import CollectorRegistry, multiprocess, start_http_server

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
    httpd, _ = start_http_server(settings.metrics_port, settings.metrics_bind_host, registry)
    log.info(
        "metrics of %d workers on http://%s:%d/metrics",
        settings.workers,
        settings.metrics_bind_host,
        httpd.server_port,
    )
    return httpd


def supervise(settings: Settings) -> int:
    """Run `settings.workers` worker processes until a signal; return the exit status."""
    directory = tempfile.mkdtemp(prefix="attnserve-metrics-")
    env = {**os.environ, MULTIPROC_ENV: directory}
    stopping = False

    def forward(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)

    httpd = _start_metrics(settings, directory) if settings.metrics else None
    payload = settings.model_dump_json()
    processes: list[subprocess.Popen[bytes]] = []
    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    status = 0
    try:
        for _ in range(settings.workers):
            processes.append(
                subprocess.Popen([sys.executable, "-m", "attnserve.service.workers", payload], env=env)
            )
        log.info(
            "started %d workers on port %d: pids %s",
            settings.workers,
            settings.port,
            [p.pid for p in processes],
        )
        while any(p.poll() is None for p in processes):
            time.sleep(0.2)
            failed = [p for p in processes if p.poll() not in (None, 0)]
            if failed and not stopping:
                log.error(
                    "worker pid %d exited with status %s; stopping the others",
                    failed[0].pid,
                    failed[0].returncode,
                )
                forward(signal.SIGTERM, None)
        # Workers never stop on their own unless something is wrong.
        status = 0 if stopping and all(p.returncode == 0 for p in processes) else 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
        if httpd is not None:
            httpd.shutdown()
        shutil.rmtree(directory, ignore_errors=True)
    return status


def _stop_before_serving(signum: int, frame: FrameType | None) -> None:
    # A worker still loading its models has accepted no call: a stop now is a clean stop.
    # The server replaces this handler with its draining one before it takes traffic.
    log.info("stopped before serving (signal %d)", signum)
    raise SystemExit(0)


def _worker_main(payload: str) -> int:
    signal.signal(signal.SIGTERM, _stop_before_serving)
    signal.signal(signal.SIGINT, _stop_before_serving)
    from attnserve.service.run import configure_logging, run_server

    settings = Settings(**json.loads(payload))  # explicit values: the environment cannot change them
    configure_logging(settings.log_level, prefix=f"worker {os.getpid()} ")
    return run_server(settings, serve_metrics=False)


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1]))
