"""Load-test fixtures: a real server on free 127.0.0.1 ports and a runner for `python -m loadtest`."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.support.servers import RunningServer, make_settings

REPO = Path(__file__).resolve().parents[2]
MODEL = "car"


@pytest.fixture(scope="module")
def server(model_repository: Path) -> Iterator[RunningServer]:
    with RunningServer(make_settings(model_repository)) as running:
        yield running


def metrics_url(server: RunningServer) -> str:
    assert server.server is not None
    return f"http://127.0.0.1:{server.server.metrics_port}/metrics"


def run_loadtest(args: Sequence[str], timeout: float = 150) -> subprocess.CompletedProcess[str]:
    """`python -m loadtest ARGS` from the repository root (its output is kept for failures)."""
    command = [sys.executable, "-m", "loadtest", "--quiet", *args]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout)


def read_json(path: Path) -> Any:
    assert path.is_file(), f"{path.name} was not written"
    return json.loads(path.read_text())
