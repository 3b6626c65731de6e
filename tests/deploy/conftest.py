"""Shared pieces of the deployment tests: external tools, and the rule for when one is missing."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.deploy.containers import Engine, build_images, find_engine, image_name

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


@dataclass(frozen=True)
class BuiltImages:
    serve: str
    loadtest: str
    train: str
    prometheus: str
    seconds: float  # what deploy/images.sh took in this session (cached images: seconds)


# Cold, deploy/images.sh makes the Debian and Python bases and four images: minutes on 2 cores.
BUILD_TIMEOUT_S = 1800.0


@pytest.fixture(scope="session")
def container_engine(tmp_path_factory: pytest.TempPathFactory) -> Engine:
    """The engine deploy/images.sh uses. Skipped, with the reason, where no container can start."""
    found = find_engine(tmp_path_factory.mktemp("engine-probe"))
    if isinstance(found, str):
        pytest.skip(found)
    return found


@pytest.fixture(scope="session")
def images(container_engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> BuiltImages:
    """The images of deploy/images.sh, built once per session (unchanged inputs: reused)."""
    log = tmp_path_factory.mktemp("images") / "images.log"
    seconds = build_images(container_engine, [], log, BUILD_TIMEOUT_S)
    names = {
        which: image_name(container_engine, which) for which in ("serve", "loadtest", "train", "prometheus")
    }
    return BuiltImages(**names, seconds=seconds)
