"""V2 protocol fixtures: a real server, raw gRPC calls, and the Triton tools environment.

The real Triton clients (tritonclient, perf_analyzer) live in `.venv-tools`, made by
`tools/triton-env.sh`. Without it these tests fail under CI (which creates it first) and
are skipped, with the reason, on a developer machine where CI is unset.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.servers import RunningServer, make_settings
from tests.support.v2 import V2Calls

ROOT = Path(__file__).resolve().parents[4]
TOOLS_VENV = Path(os.environ.get("ATTNSERVE_TOOLS_VENV", ROOT / ".venv-tools"))
PERF_ANALYZER_SH = ROOT / "tools" / "perf-analyzer.sh"


def missing_tools(reason: str) -> None:
    message = f"{reason}; create the Triton tools environment with `bash tools/triton-env.sh`"
    if os.environ.get("CI"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def tools_python() -> Path:
    python = TOOLS_VENV / "bin" / "python"
    if not python.is_file():
        missing_tools(f"no tools environment at {TOOLS_VENV}")
    probe = subprocess.run(
        [str(python), "-c", "import tritonclient.grpc"], capture_output=True, text=True, timeout=60
    )
    if probe.returncode != 0:
        missing_tools(f"tritonclient[grpc] does not import in {TOOLS_VENV}: {probe.stderr.strip()[-300:]}")
    return python


@pytest.fixture(scope="session")
def perf_analyzer(tools_python: Path) -> Path:
    located = subprocess.run(
        ["bash", str(PERF_ANALYZER_SH), "--locate"], capture_output=True, text=True, timeout=60
    )
    if located.returncode != 0:
        missing_tools(f"perf_analyzer is not usable: {located.stderr.strip()}")
    return PERF_ANALYZER_SH


@pytest.fixture(scope="module")
def server(model_repository: Path) -> Iterator[RunningServer]:
    with RunningServer(make_settings(model_repository)) as running:
        yield running


@pytest.fixture(scope="module")
def v2(server: RunningServer) -> Iterator[V2Calls]:
    calls = V2Calls(server.target)
    yield calls
    calls.close()
