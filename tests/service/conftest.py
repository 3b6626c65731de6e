"""Service fixtures: a server shared by a test module, built on the suite's model repository."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from attnserve.service.client import Client
from tests.support.servers import RunningServer, make_settings


@pytest.fixture(scope="module")
def server(model_repository: Path) -> Iterator[RunningServer]:
    """A server with default settings on free ports, shared by the tests of one module."""
    with RunningServer(make_settings(model_repository)) as running:
        yield running


@pytest.fixture(scope="module")
def client(server: RunningServer) -> Iterator[Client]:
    with Client(server.target, timeout=30) as connected:
        yield connected


@pytest.fixture
def repository(model_repository: Path, tmp_path: Path) -> Path:
    """A private repository holding car/1 and pool/1, for tests that add, damage or remove versions."""
    root = tmp_path / "models"
    for name in ("car", "pool"):
        shutil.copytree(model_repository / name / "1", root / name / "1")
    return root
