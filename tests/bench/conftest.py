"""Benchmark fixtures: every section of `python -m bench` at its --tiny size on a tiny model.

The bundle is the suite's tiny transformer (tests/support/runs.py: about a second to train)
exported as `car`, so no benchmark test waits for the accurate car-order model. Tiny mode
measures for fractions of a second per point: these tests prove that every section still
runs end to end and writes its outputs, never how fast anything is. Tools the suite cannot
install itself (perf_analyzer in .venv-tools, py-spy) fail the test under CI and skip it,
with the reason, on a developer machine.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from attnserve.export.writer import export_run
from bench.cli import main

MODEL = "car"
PNGS = ("throughput_vs_concurrency.png", "latency_vs_concurrency.png", "rss_over_time.png",
        "throughput_vs_seqlen.png")  # fmt: skip


@pytest.fixture(scope="session")
def bench_repository(trained_run: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model repository holding `car/1`: the tiny transformer, attention [B, L, H, T, T]."""
    repository = tmp_path_factory.mktemp("bench") / "models"
    export_run(trained_run("transformer"), repository, MODEL)
    return repository


def missing_tool(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def run_suite(repository: Path, out: Path, sections: str, *extra: str) -> dict[str, Any]:
    """Run sections of the serving suite in tiny mode; return results.json after checking the outputs."""
    status = main(["--tiny", "--repository", str(repository), "--model", MODEL, "--out", str(out),
                   "--sections", sections, "--strict", *extra])  # fmt: skip
    results: dict[str, Any] = json.loads((out / "results.json").read_text())
    assert status == 0, results["skipped"]
    report = (out / "report.md").read_text()
    assert report.startswith("# attnserve benchmark (tiny mode")
    assert "## Key ratios" in report and "**Machine**" in report
    for name in PNGS:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    return results


def points(results: dict[str, Any], system: str) -> list[dict[str, Any]]:
    return [p for p in results["points"] if p["system"] == system]


def docs_copy(tmp: Path, root: Path, pages: tuple[str, ...]) -> Path:
    """A docs folder holding copies of `pages` (paths under docs/), for --publish to write into."""
    docs = tmp / "docs"
    for page in pages:
        (docs / page).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(root / "docs" / page, docs / page)
    return docs
