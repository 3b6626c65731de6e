"""Servers under test, each a subprocess on 127.0.0.1, started and stopped by a context manager.

attnserve runs through `bench.service_bench.ServerProcess` (`python -m attnserve.service.cli`); the
naive baseline and MLServer through `Launched`. `rss_bytes` sums the resident memory of a
server and its children (`--workers N` forks N processes).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
import psutil
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.perf_analyzer_sweep import free_port
from bench.service_bench import ServerProcess

ROOT = Path(__file__).resolve().parent.parent
READY_TIMEOUT_S = 120.0


def _process_tree(pid: int) -> list[psutil.Process]:
    """Process `pid` and all its descendants; empty once it has exited."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def rss_bytes(pid: int) -> int:
    """Resident memory of process `pid` and all its descendants (0 once it has exited)."""
    processes = _process_tree(pid)
    total = 0
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            total += process.memory_info().rss
    return total


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` and its descendants, from /proc (psutil)."""
    total = 0.0
    for process in _process_tree(pid):
        with contextlib.suppress(psutil.NoSuchProcess):
            times = process.cpu_times()
            total += times.user + times.system
    return total


def listeners(pid: int, port: int) -> int:
    """How many processes of the tree under `pid` listen on `port` (workers bind one by one)."""
    count = 0
    for process in _process_tree(pid):
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            if any(
                c.status == psutil.CONN_LISTEN and c.laddr.port == port
                for c in process.net_connections("tcp")
            ):
                count += 1
    return count


def health_serving(target: str, connections: int = 1, timeout: float = 2.0) -> bool:
    """True when `connections` fresh connections all report SERVING (with SO_REUSEPORT each
    lands on one worker, so several probes make it likely every worker answered)."""
    for index in range(connections):
        options = [("grpc.use_local_subchannel_pool", 1), ("bench.probe", index)]
        with grpc.insecure_channel(target, options=options) as channel:
            try:
                reply = health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(), timeout=timeout
                )
            except grpc.RpcError:
                return False
            if reply.status != health_pb2.HealthCheckResponse.SERVING:
                return False
    return True


@dataclass
class Launched:
    """A server started from a command line; `target` is its gRPC address."""

    process: subprocess.Popen[bytes]
    target: str
    metrics_url: str | None = None
    log: Path | None = None  # where the server's output goes, quoted when it fails to start

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_ready(self, probe: Callable[[], bool], what: str, timeout: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while not probe():
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"{what} exited with status {self.process.returncode} before it was ready{self._tail()}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} was not ready after {timeout:.0f}s{self._tail()}")
            time.sleep(0.25)

    def _tail(self) -> str:
        if self.log is None or not self.log.is_file():
            return ""
        return ":\n" + self.log.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


@contextlib.contextmanager
def attnserve(repository: Path, flags: Sequence[str] = (), *, workers: int = 1) -> Iterator[Launched]:
    """attnserve-serve with `flags`, metrics on a free port; every worker ready on return."""
    metrics_port = free_port()
    all_flags = [*flags, "--workers", str(workers), "--metrics", "--metrics-host", "127.0.0.1",
                 "--metrics-port", str(metrics_port)]  # fmt: skip
    server = ServerProcess(repository, all_flags)
    launched = Launched(server.process, server.target, f"http://127.0.0.1:{metrics_port}/metrics")
    try:
        launched.wait_ready(
            lambda: health_serving(server.target, 4 * workers if workers > 1 else 1), "attnserve"
        )
        yield launched
    finally:
        launched.stop()


@contextlib.contextmanager
def naive(bundle: Path, *, threads: int = 10) -> Iterator[Launched]:
    port = free_port()
    command = [sys.executable, "-m", "bench.naive_server", "--bundle", str(bundle), "--port", str(port),
               "--threads", str(threads)]  # fmt: skip
    launched = Launched(subprocess.Popen(command, cwd=ROOT), f"127.0.0.1:{port}")
    try:
        launched.wait_ready(lambda: health_serving(launched.target), "the naive server")
        yield launched
    finally:
        launched.stop()


def spawn(command: Sequence[str], target: str, log: Path, env: dict[str, str] | None = None,
          cwd: Path = ROOT) -> Launched:  # fmt: skip
    """Start `command` with its output in `log` (quoted if it fails to start)."""
    with log.open("wb") as sink:
        process = subprocess.Popen(
            list(command), cwd=cwd, env={**os.environ, **(env or {})}, stdout=sink, stderr=subprocess.STDOUT
        )
    return Launched(process, target, log=log)
