"""`attnserve-serve` as a separate process on free 127.0.0.1 ports, for tests that signal
it or measure its memory apart from the test's own; kit/launch.py starts and stops it."""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from types import TracebackType

from kit.launch import ROOT, Launched, attnserve_command, health_serving, spawn
from kit.ports import free_port
from tests.support.servers import metric_samples, scrape


class ServerProcess:
    def __init__(
        self,
        repository: Path,
        *args: str,
        env: dict[str, str] | None = None,
        python: str = sys.executable,
        cwd: Path = ROOT,
    ) -> None:
        self.python, self.cwd = python, cwd
        self.port, self.metrics_port = free_port(), free_port()
        self.command = attnserve_command(repository, self.port, self.metrics_port, *args, python=python)
        self.env = {"PYTHONUNBUFFERED": "1", **(env or {})}
        self.launched: Launched | None = None
        # A file, not a pipe: a server that logs more than a pipe holds must never block on it.
        self._folder = tempfile.TemporaryDirectory(prefix="attnserve-test-")

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        return None if self.launched is None else self.launched.process

    @property
    def pid(self) -> int:
        assert self.launched is not None
        return self.launched.pid

    def __enter__(self) -> ServerProcess:
        log = Path(self._folder.name) / "server.log"
        self.launched = spawn(self.command, self.target, log, env=self.env, cwd=self.cwd)
        self.launched.wait_ready(lambda: health_serving(self.target), "the server", timeout=90)
        return self

    def metric(self, name: str, **labels: str) -> float:
        return sum(metric_samples(scrape(self.metrics_port), name, **labels))

    def terminate(self) -> None:
        assert self.launched is not None
        self.launched.process.send_signal(signal.SIGTERM)

    @property
    def output(self) -> str:
        """Everything the server wrote so far (stdout and stderr)."""
        log = Path(self._folder.name) / "server.log"
        return log.read_bytes().decode(errors="replace") if log.is_file() else ""

    def wait(self, timeout: float) -> int:
        """Wait for the exit. Raises subprocess.TimeoutExpired."""
        assert self.launched is not None
        return self.launched.process.wait(timeout=timeout)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if self.launched is not None:
                self.launched.stop()
        finally:
            self._folder.cleanup()
