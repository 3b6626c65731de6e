"""HTTP fixtures: a real server serving gRPC and HTTP on free 127.0.0.1 ports."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from attnserve.service.client import Client
from tests.support.servers import RunningServer, free_port, make_settings


@pytest.fixture(scope="module")
def server(model_repository: Path) -> Iterator[RunningServer]:
    with RunningServer(make_settings(model_repository, http_port=free_port())) as running:
        yield running


@pytest.fixture(scope="module")
def port(server: RunningServer) -> int:
    assert server.server is not None
    return server.server.http_port


@pytest.fixture(scope="module")
def client(server: RunningServer) -> Iterator[Client]:
    with Client(server.target, timeout=30) as connected:
        yield connected


# The Triton tools environment's fixtures (tritonclient, perf_analyzer), shared with the V2 tests.
from tests.service.api.v2.conftest import perf_analyzer, tools_python  # noqa: E402, F401
