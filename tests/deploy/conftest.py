"""Shared pieces of the deployment tests: external tools, and the rule for when one is missing."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "rehearsal: runs docker-compose services as local processes with a real Prometheus"
    )


def find_tool(name: str) -> str | None:
    """`name` on PATH or next to the running interpreter (tools installed into the venv)."""
    return shutil.which(name, path=os.pathsep.join([str(VENV_BIN), os.environ.get("PATH", "")]))


def require_tool(name: str, install_hint: str) -> str:
    """The tool's path. Missing in CI is a failure (CI installs it); elsewhere the test is skipped."""
    path = find_tool(name)
    if path is not None:
        return path
    message = (
        f"{name} is not installed ({install_hint}); deploy/ci-requirements.txt lists what the tests need"
    )
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message + " [skipped outside CI only]")
