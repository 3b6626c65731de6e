"""`attnserve-serve` as a separate process on free 127.0.0.1 ports, for tests that signal
it or measure its memory apart from the test's own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

from attnserve.service.client import Client, ClientError
from tests.support.servers import free_port, metric_samples, scrape

ROOT = Path(__file__).resolve().parents[2]


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
        self.args = [
            "--repository",
            str(repository),
            "--port",
            str(self.port),
            "--metrics-port",
            str(self.metrics_port),
            *args,
        ]
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.process: subprocess.Popen[bytes] | None = None
        # A file, not a pipe: a server that logs more than a pipe holds must never block on it.
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 (closed in __exit__)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def __enter__(self) -> ServerProcess:
        self.process = subprocess.Popen(
            [self.python, "-m", "attnserve.service.cli", *self.args],
            cwd=self.cwd,
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 90
        while True:
            assert self.process.poll() is None, self.output
            assert time.monotonic() < deadline, "the server did not become ready in 90 s"
            try:
                with Client(self.target, timeout=2) as client:
                    if client.health() == "SERVING":
                        return self
            except ClientError:
                time.sleep(0.1)

    def metric(self, name: str, **labels: str) -> float:
        return sum(metric_samples(scrape(self.metrics_port), name, **labels))

    def terminate(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)

    @property
    def output(self) -> str:
        """Everything the server wrote so far (stdout and stderr)."""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")

    def wait(self, timeout: float) -> int:
        """Wait for the exit. Raises subprocess.TimeoutExpired."""
        assert self.process is not None
        return self.process.wait(timeout=timeout)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        process = self.process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._log.close()
