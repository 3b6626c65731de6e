"""A real server for tests: `RunningServer` runs `service.server.Server` on 127.0.0.1 with
free ports in a background thread (its own event loop), so tests call it over real gRPC
channels from the main thread, with sync or asyncio clients."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from attnserve.service.server import Server
from attnserve.service.settings import Settings
from kit import metrics
from kit.ports import free_port as free_port  # the tests' one way to pick a port

T = TypeVar("T")


def scrape(metrics_port: int) -> str:
    return metrics.scrape(f"http://127.0.0.1:{metrics_port}/metrics")


metric_samples = metrics.values


def make_settings(repository: Path, **overrides: Any) -> Settings:
    # No polling unless a test asks: tests that change a repository decide when a reload happens.
    values: dict[str, Any] = {
        "repository": repository,
        "host": "127.0.0.1",
        "port": 0,
        "metrics_port": 0,
        "repository_poll_seconds": 0.0,
    }
    values.update(overrides)
    return Settings(**values)


def plain_settings(**values: Any) -> Settings:
    """`Settings(**values)`: the environment and `values` only, none of make_settings' defaults."""
    # mypy, without pydantic's plugin, reads every field as a required argument
    return Settings(**values)


class RunningServer:
    def __init__(self, settings: Settings, *, load: bool = True) -> None:
        self.settings = settings
        self._load = load
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="test-server", daemon=True)
        self.server: Server | None = None

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        """Run a coroutine on the server's event loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    async def _start(self) -> Server:
        server = Server(self.settings)
        if self._load:
            await server.start()
        else:
            await server.listen()
        return server

    def __enter__(self) -> RunningServer:
        self._thread.start()
        self.server = self.run(self._start())
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if self.server is not None:
                self.run(self.server.shutdown(grace=5.0))
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self.loop.close()

    def pending_tasks(self) -> int:
        """Unfinished tasks on the server's event loop (handlers of calls in progress among
        them), the one asking left out: back at an earlier count once the calls since have ended."""
        return self.run(_pending_tasks())

    @property
    def target(self) -> str:
        assert self.server is not None
        return self.server.target

    def metrics_text(self) -> str:
        assert self.server is not None
        return scrape(self.server.metrics_port)

    def samples(self, name: str, **labels: str) -> list[float]:
        """Values of the samples called `name` whose labels include `labels`."""
        return metric_samples(self.metrics_text(), name, **labels)

    def value(self, name: str, **labels: str) -> float:
        """The sum of matching samples (0 when there are none)."""
        return sum(self.samples(name, **labels))


async def _pending_tasks() -> int:
    return len(asyncio.all_tasks()) - 1
