"""Servers as subprocesses: launching, readiness, stopping, and the CPU and memory of a
server's process tree; `run_async` for loads that SIGTERM must be able to stop.

Every server is a subprocess on 127.0.0.1 in a process group of its own, whose output goes to
a log file, quoted when it exits or is not ready in time. attnserve starts through
`attnserve_command()` (the `attnserve-serve` entry point); other systems start through
`spawn()` and wait with a probe of their protocol (`health_serving`, `v2_ready`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import grpc
import psutil
from grpc_health.v1 import health_pb2, health_pb2_grpc

from attnserve.service.proto.inference import grpc_service_pb2 as v2_pb
from kit.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
READY_TIMEOUT_S = 120.0
T = TypeVar("T")


def _process_tree(pid: int) -> list[psutil.Process]:
    """Process `pid` and all its descendants; empty once it has exited."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def rss_bytes(pid: int) -> int:
    """Resident memory of process `pid` and its descendants (`--workers N` forks N; 0 once gone)."""
    total = 0
    for process in _process_tree(pid):
        with contextlib.suppress(psutil.NoSuchProcess):
            total += process.memory_info().rss
    return total


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` and its descendants, from /proc."""
    total = 0.0
    for process in _process_tree(pid):
        with contextlib.suppress(psutil.NoSuchProcess):
            times = process.cpu_times()
            total += times.user + times.system
    return total


def health_serving(target: str, connections: int = 1, timeout: float = 2.0) -> bool:
    """True when `connections` fresh connections all report SERVING (grpc.health.v1). With
    SO_REUSEPORT each lands on one worker, so several probes make it likely every worker answered."""
    for index in range(connections):
        options = [("grpc.use_local_subchannel_pool", 1), ("kit.probe", index)]
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


def v2_ready(target: str, model: str | None = None, timeout: float = 2.0) -> bool:
    """V2 `ModelReady` of `model`, or `ServerReady` without one (servers without grpc.health)."""
    method = "ModelReady" if model else "ServerReady"
    body = v2_pb.ModelReadyRequest(name=model) if model else v2_pb.ServerReadyRequest()
    with grpc.insecure_channel(target) as channel:
        call = channel.unary_unary(
            f"/inference.GRPCInferenceService/{method}", request_serializer=None, response_deserializer=None
        )
        try:
            reply: bytes = call(body.SerializeToString(), timeout=timeout)
        except grpc.RpcError:
            return False
    # ModelReadyResponse and ServerReadyResponse are both `bool ready = 1`.
    return bool(v2_pb.ModelReadyResponse.FromString(reply).ready)


@dataclass
class Launched:
    """A server started from a command line; `target` is its gRPC address."""

    process: subprocess.Popen[bytes]
    target: str
    metrics_url: str | None = None
    log: Path | None = None

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
            time.sleep(0.05)  # a probe of a port not yet listening fails at once: polling often costs little

    def _tail(self) -> str:
        if self.log is None or not self.log.is_file():
            return ""
        return ":\n" + self.log.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        """SIGTERM to the server's process group (workers included), SIGKILL after 30 s, and
        SIGKILL to any descendant that outlived its parent."""
        tree = _process_tree(self.process.pid)
        if self.process.poll() is None:
            _signal_group(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                _signal_group(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        for process in tree[1:]:
            with contextlib.suppress(psutil.NoSuchProcess):
                if process.is_running():
                    process.kill()


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signum)


def spawn(
    command: Sequence[str], target: str, log: Path, *, env: dict[str, str] | None = None, cwd: Path = ROOT,
    metrics_url: str | None = None,
) -> Launched:  # fmt: skip
    """Start `command` with its output in `log` (quoted if it fails to start), in a process
    group of its own: `stop()` ends the group, and a Ctrl-C at the terminal reaches only the
    driver, which then stops its servers in order."""
    with log.open("wb") as sink:
        process = subprocess.Popen(
            list(command), cwd=cwd, env={**os.environ, **(env or {})}, stdout=sink, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    return Launched(process, target, metrics_url, log)


class Stopped(BaseException):
    """SIGTERM reached the driver: unwinds every `with` that started a server (a BaseException,
    so no section's `except Exception` takes it for a failed measurement)."""


@contextlib.contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """While inside, SIGTERM raises `Stopped` in the main thread, so the servers' `finally`
    blocks run as they do for Ctrl-C; the previous handler comes back on the way out."""

    def stop(signum: int, frame: object) -> None:
        raise Stopped(signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)`, with SIGTERM cancelling `main` and raising `Stopped` once it has
    unwound. Raised straight from the signal handler, `Stopped` could land inside one of the
    loop's callbacks, where asyncio logs it and runs on: the load would go on to its end."""
    if threading.current_thread() is not threading.main_thread():
        return asyncio.run(main)
    previous = signal.getsignal(signal.SIGTERM)
    signalled: list[int] = []

    async def guarded() -> T:
        loop, task = asyncio.get_running_loop(), asyncio.current_task()
        assert task is not None

        def cancel(signum: int, frame: object) -> None:
            signalled.append(signum)
            loop.call_soon_threadsafe(task.cancel)

        signal.signal(signal.SIGTERM, cancel)
        try:
            return await main
        except asyncio.CancelledError:
            if signalled:
                raise Stopped(signalled[0]) from None
            raise
        finally:
            signal.signal(signal.SIGTERM, previous)

    try:
        return asyncio.run(guarded())
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def launched(
    command: Sequence[str], target: str, probe: Callable[[str], bool], what: str, *,
    log: Path | None = None, env: dict[str, str] | None = None, cwd: Path = ROOT,
    metrics_url: str | None = None, timeout: float = READY_TIMEOUT_S,
) -> Iterator[Launched]:  # fmt: skip
    """Start `command`, wait until `probe(target)` holds, stop it (SIGTERM) on the way out."""
    with contextlib.ExitStack() as cleanup:
        if log is None:
            log = Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="attnserve-kit-"))) / "log"
        server = spawn(command, target, log, env=env, cwd=cwd, metrics_url=metrics_url)
        try:
            server.wait_ready(lambda: probe(target), what, timeout)
            yield server
        finally:
            server.stop()


def attnserve_command(
    repository: Path, port: int, metrics_port: int, *flags: str, python: str = sys.executable
) -> list[str]:
    """attnserve-serve's command line with `flags` (later flags win), metrics on `metrics_port`."""
    return [python, "-m", "attnserve.service.cli", "--repository", str(repository), "--port", str(port),
            "--metrics-port", str(metrics_port), *flags]  # fmt: skip


@contextlib.contextmanager
def attnserve(
    repository: Path, flags: Sequence[str] = (), *, workers: int = 1, log: Path | None = None
) -> Iterator[Launched]:
    """attnserve-serve on a free port with `flags` (later flags win), metrics on another free
    port, HTTP off unless `flags` turn it on; every worker ready on return."""
    port, metrics_port = free_port(), free_port()
    command = attnserve_command(
        repository, port, metrics_port, "--host", "127.0.0.1", "--metrics-host", "127.0.0.1",
        "--http-port", "0", "--log-level", "warning", "--metrics", "--workers", str(workers), *flags,
    )  # fmt: skip
    probes = 4 * workers if workers > 1 else 1
    with launched(
        command, f"127.0.0.1:{port}", lambda target: health_serving(target, probes), "attnserve",
        log=log, env={"GRPC_VERBOSITY": "ERROR"}, metrics_url=f"http://127.0.0.1:{metrics_port}/metrics",
    ) as server:  # fmt: skip
        yield server
