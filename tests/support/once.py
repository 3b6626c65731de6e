"""A session fixture's expensive build, done once per `make test` rather than once per process.

pytest-xdist's workers are separate processes and `make test`'s serial phase is a second
pytest session, so a session fixture would build its models three times. `built_once` builds
into a folder that all of them share, under a file lock: the first to ask builds, the others
wait and reuse it. The folder is `$ATTNSERVE_TEST_SHARED` when set (the Makefile sets it for
both phases and removes it afterwards), else the directory the workers' temporary folders
share. What is built there is read, never modified: tests that change a bundle copy it first.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

SHARED_ENV = "ATTNSERVE_TEST_SHARED"
DONE = ".built"  # written last: names what the build returned, relative to its folder


def shared_root(factory: pytest.TempPathFactory) -> Path:
    """Where builds are shared: the run's folder, or the xdist workers' common parent."""
    named = os.environ.get(SHARED_ENV)
    if named:
        return Path(named)
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def built_once(name: str, build: Callable[[Path], Path], factory: pytest.TempPathFactory) -> Path:
    """`build(folder)`'s result, built by the first process of the run to ask for `name`."""
    root = shared_root(factory)
    root.mkdir(parents=True, exist_ok=True)
    folder = root / f"once-{name}"
    with open(root / f"once-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        done = folder / DONE
        if not done.is_file():  # never built, or a build that failed part way
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            done.write_text(build(folder).relative_to(folder).as_posix())
        return folder / done.read_text()
