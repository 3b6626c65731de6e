"""The bundles shipped in the repository (models/car-order/1, the default model, and
models/sst2-sentiment/2, the latest version of the second), copied into a private repository
so tests serve the very files `make serve` serves without training anything."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.servers import RunningServer, free_port, make_settings

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "models" / "car-order"
NAME = "car-order"
SENTIMENT = "sst2-sentiment"
SENTIMENT_VERSION = 2  # the version `make serve` serves: the repository's latest


def shipped_repository(root: Path) -> Path:
    """`root/models` holding car-order/1, a copy of the shipped bundle; return `root/models`."""
    repository = root / "models"
    shutil.copytree(SHIPPED / "1", repository / NAME / "1")
    return repository


def shipped_sentiment(repository: Path) -> Path:
    """Add a copy of the shipped SST-2 model's served version to `repository`; return its folder."""
    version = str(SENTIMENT_VERSION)
    return Path(shutil.copytree(ROOT / "models" / SENTIMENT / version, repository / SENTIMENT / version))


@contextmanager
def serving_shipped(root: Path, **settings: Any) -> Iterator[RunningServer]:
    """A real server on a private copy of car-order/1 (below `root`), HTTP on a free port."""
    repository = shipped_repository(root)
    with RunningServer(make_settings(repository, http_port=free_port(), **settings)) as running:
        yield running
