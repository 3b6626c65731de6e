"""The car-order bundle shipped in the repository (models/car-order/1), copied into a private
repository so tests serve the very files `make serve` serves without training anything."""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "models" / "car-order"
NAME = "car-order"


def shipped_repository(root: Path) -> Path:
    """`root/models` holding car-order/1, a copy of the shipped bundle; return `root/models`."""
    repository = root / "models"
    shutil.copytree(SHIPPED / "1", repository / NAME / "1")
    return repository
