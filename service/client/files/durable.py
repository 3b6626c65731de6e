"""Renames and new files that survive a power cut: a rename or a new directory entry is on
disk only once its directory is fsynced, so a crash right after cannot bring the old name back."""

from __future__ import annotations

import os
from pathlib import Path


def sync_directory(directory: Path) -> None:
    handle = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def replace(staging: Path, target: Path) -> None:
    """Move `staging` (already fsynced) over `target` and make the move durable."""
    staging.replace(target)
    sync_directory(target.parent)
