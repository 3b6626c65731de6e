"""The repository layout: `<repository>/<name>/<version>/`, and which folders count.

A bundle is written to a staging folder (`STAGING_PREFIX` + anything) inside the model's
folder and renamed to its version number when complete, so a reader that lists version
folders never sees half a bundle. Symlinks that lead out of the repository are refused.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

log = logging.getLogger(__name__)

STAGING_PREFIX = ".staging-"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.-]+$")


class RepositoryError(Exception):
    """The repository holds nothing servable (fatal at start-up)."""


def is_version_dir(path: Path) -> bool:
    """True for a completed version folder (a positive integer name), never a staging folder."""
    name = path.name  # ASCII digits only: "²" and "١" pass str.isdigit() but are no version
    return path.is_dir() and name.isascii() and name.isdigit() and name[0] != "0"


def valid_model_name(name: str) -> bool:
    """A name the admin API accepts: [A-Za-z0-9_.-]+, not hidden, no '..' anywhere."""
    return bool(NAME_PATTERN.fullmatch(name)) and not name.startswith(".") and ".." not in name


def confined(root: Path, path: Path) -> bool:
    """True when `path`, symlinks resolved, lies inside `root` (resolved)."""
    try:
        return path.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError):  # a symlink loop, or a path that cannot be resolved
        return False


def scan(root: Path, *, report: bool = True) -> dict[str, list[int]]:
    """Model names and their complete version folders, versions descending. What is skipped
    is logged as a warning when `report` (at start-up), else at debug level (each poll)."""
    if not root.is_dir():
        raise RepositoryError(f"model repository {root} does not exist or is not a directory")
    warn = log.warning if report else log.debug
    found: dict[str, list[int]] = {}
    for entry in sorted(root.iterdir()):
        if not entry.is_dir() or entry.name.startswith(".") or not NAME_PATTERN.fullmatch(entry.name):
            log.debug("repository: skipping %s (not a model folder)", entry.name)
            continue
        versions = []
        for path in entry.iterdir() if confined(root, entry) else ():
            if is_version_dir(path) and confined(root, path):
                versions.append(int(path.name))
            elif is_version_dir(path):
                warn(
                    "repository: skipping %s/%s: a symlink leading outside the repository",
                    entry.name,
                    path.name,
                )
        if not confined(root, entry):
            warn("repository: skipping %s: a symlink leading outside the repository", entry.name)
        elif versions:
            found[entry.name] = sorted(versions, reverse=True)
        else:
            warn("repository: %s has no complete version folder", entry.name)
    return found


Fingerprint = tuple[tuple[str, int, int], ...]


def fingerprint(version_dir: Path) -> Fingerprint:
    """(path, size, modification time) of every file under `version_dir`, subfolders included:
    a file copied over in place (a cascade member's `teacher/model.onnx`) leaves its folder's
    own time unchanged. Stat calls only, no reads."""
    entries: list[tuple[str, int, int]] = []
    _stat_files(version_dir, "", entries)
    return tuple(entries)


def _stat_files(folder: Path | str, prefix: str, entries: list[tuple[str, int, int]]) -> None:
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        name = prefix + entry.name
        if entry.is_dir(follow_symlinks=False):  # a linked folder is one entry: no loop to follow
            try:
                _stat_files(entry.path, name + "/", entries)
            except OSError:  # removed while we looked (a member being replaced): the version stays
                entries.append((name + "/", -1, -1))
            continue
        try:
            info = entry.stat()
        except OSError:  # vanished or a dangling link: still part of the folder's state
            info = entry.stat(follow_symlinks=False)
        entries.append((name, info.st_size, info.st_mtime_ns))
