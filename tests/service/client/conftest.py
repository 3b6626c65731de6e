"""What the file-job tests share: a client of the module's own `server` (each module serves
with the limits it tests), and the rejects a job wrote."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from attnserve.service.client import Client
from tests.support.servers import RunningServer


@pytest.fixture(scope="module")
def client(server: RunningServer) -> Iterator[Client]:
    with Client(server.target, timeout=30) as connected:
        yield connected


def rejects_of(output: Path) -> list[dict[str, Any]]:
    """The rejects file beside `output`, one record a rejected row."""
    path = output.with_name(output.name + ".rejects.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]
