"""`--workers N`: N server processes sharing one port, the way a Python server uses N cores.

The supervisor starts N worker processes (`python -m attnserve.service.workers SETTINGS_JSON`), each
a full `Server` with its own models, batchers and sessions, all bound to the same port
with SO_REUSEPORT (the kernel spreads connections over them); a worker binds only once its
models are loaded and checked, so no connection lands on a worker still loading. Metrics
are written by the workers into prometheus_client's multiprocess directory and served,
summed, by the supervisor on the metrics port. SIGTERM/SIGINT are forwarded; each worker
drains as a single server would. A worker that dies on its own is restarted alone (see
`supervise`); only a crash loop stops the set, with exit status 1.
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
from dataclasses import dataclass, field
from types import FrameType
from wsgiref.simple_server import WSGIServer

from attnserve.service.errors import StartupError
from attnserve.service.ports import metrics_port_error
from attnserve.service.settings import Settings

log = logging.getLogger(__name__)
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def _start_metrics(settings: Settings, directory: str) -> WSGIServer:
    from prometheus_client import CollectorRegistry, start_http_server

    from attnserve.service.observe.merged import WorkerFiles

    registry = CollectorRegistry()
    registry.register(WorkerFiles(directory))
    try:
        httpd, _ = start_http_server(settings.metrics_port, settings.metrics_bind_host, registry)
    except OSError as exc:
        raise metrics_port_error(settings, exc) from None
    log.info(
        "metrics of %d workers on http://%s:%d/metrics",
        settings.workers,
        settings.metrics_bind_host,
        httpd.server_port,
    )
    return httpd


_BACKOFF_FIRST_S = 0.5
_BACKOFF_MAX_S = 8.0


@dataclass
class _Slot:
    """One worker position: its current process and its recent deaths."""

    index: int
    process: subprocess.Popen[bytes] | None = None
    deaths: list[float] = field(default_factory=list)  # time.monotonic() of each
    restart_at: float | None = None


class _Supervisor:
    def __init__(self, settings: Settings, env: dict[str, str], directory: str) -> None:
        self.settings, self.env, self.directory = settings, env, directory
        self.slots = [_Slot(index) for index in range(settings.workers)]
        # Only the values the operator set (flags and environment): a field left unset must stay
        # unset in the worker, where validators tell a default from a choice.
        self.payload = settings.model_dump_json(exclude_unset=True)
        self.stopping = False
        self.crash_loop = False

    def spawn(self, slot: _Slot) -> None:
        command = [sys.executable, "-m", "attnserve.service.workers", self.payload]
        slot.process = subprocess.Popen(command, env=self.env)
        slot.restart_at = None

    def stop_all(self) -> None:
        self.stopping = True
        for slot in self.slots:
            if slot.process is not None and slot.process.poll() is None:
                slot.process.send_signal(signal.SIGTERM)

    def running(self) -> bool:
        return any(slot.process is not None and slot.process.poll() is None for slot in self.slots)

    def _died(self, slot: _Slot, now: float) -> None:
        process = slot.process
        assert process is not None
        slot.process = None
        _mark_dead(self.directory, process.pid)
        window = self.settings.worker_restart_window_s
        slot.deaths = [t for t in slot.deaths if now - t < window] + [now]
        restarts = sum(len(s.deaths) for s in self.slots)
        if restarts > self.settings.worker_max_restarts:
            log.error(
                "worker pid %d exited with status %s: %d worker deaths within %.0fs is a crash loop; "
                "stopping every worker",
                process.pid,
                process.returncode,
                restarts,
                window,
            )
            self.crash_loop = True
            self.stop_all()
            return
        delay = min(_BACKOFF_MAX_S, _BACKOFF_FIRST_S * 2 ** (len(slot.deaths) - 1))
        slot.restart_at = now + delay
        log.error(
            "worker pid %d exited with status %s; restarting it in %.1fs (the other workers keep serving)",
            process.pid,
            process.returncode,
            delay,
        )

    def step(self) -> None:
        """Notice dead workers and restart those whose backoff is over."""
        now = time.monotonic()
        for slot in self.slots:
            if slot.process is not None and slot.process.poll() is not None and not self.stopping:
                self._died(slot, now)
            if not self.stopping and slot.restart_at is not None and now >= slot.restart_at:
                self.spawn(slot)
                assert slot.process is not None
                log.info("worker %d restarted: pid %d", slot.index, slot.process.pid)


def _mark_dead(directory: str, pid: int) -> None:
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid, directory)  # type: ignore[no-untyped-call]


def supervise(settings: Settings) -> int:
    """Run `settings.workers` worker processes until a signal; return the exit status.

    A worker that dies is restarted alone after a backoff (0.5 s, doubling to 8 s), while
    the others keep serving; more than `worker_max_restarts` deaths within
    `worker_restart_window_s` is a crash loop: every worker is stopped and the status is 1."""
    directory = tempfile.mkdtemp(prefix="attnserve-metrics-")
    supervisor = _Supervisor(settings, {**os.environ, MULTIPROC_ENV: directory}, directory)

    def forward(signum: int, frame: FrameType | None) -> None:
        supervisor.stop_all()

    try:
        httpd = _start_metrics(settings, directory) if settings.metrics else None
    except StartupError as exc:
        log.error("cannot start: %s", exc)
        shutil.rmtree(directory, ignore_errors=True)
        return 1
    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        for slot in supervisor.slots:
            supervisor.spawn(slot)
        pids = [slot.process.pid for slot in supervisor.slots if slot.process is not None]
        log.info("started %d workers on port %d: pids %s", settings.workers, settings.port, pids)
        while not supervisor.stopping or supervisor.running():
            time.sleep(0.1)
            supervisor.step()
        clean = all(slot.process is None or slot.process.returncode == 0 for slot in supervisor.slots)
        status = 1 if supervisor.crash_loop or not clean else 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for slot in supervisor.slots:
            if slot.process is not None and slot.process.poll() is None:
                slot.process.kill()
                slot.process.wait()
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

    # The supervisor's set values, passed explicitly: the environment cannot change them; the
    # fields it left unset take their defaults here as they did there.
    settings = Settings(**json.loads(payload))
    configure_logging(settings.log_level, settings.log_format, worker=str(os.getpid()))
    return run_server(settings, serve_metrics=False, bind_after_load=True)


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1]))
