"""Benchmark fixtures: run `python -m bench --tiny` sections on the suite's model repository.

Tiny mode measures for fractions of a second per point: these tests prove that every
benchmark still runs end to end and writes its outputs, never how fast anything is.
Tools the suite cannot install itself (perf_analyzer in .venv-tools, py-spy) fail the test
under CI and skip it, with the reason, on a developer machine.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from bench.cli import main

MODEL = "car"
PNGS = ("throughput_vs_concurrency.png", "latency_vs_concurrency.png", "rss_over_time.png",
        "throughput_vs_seqlen.png")  # fmt: skip


def missing_tool(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def run_bench(repository: Path, out: Path, sections: str, *extra: str) -> dict[str, Any]:
    """Run the sections in tiny mode; return results.json after checking the common outputs."""
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


def docs_copy(tmp: Path, root: Path, names: Sequence[str]) -> Path:
    docs = tmp / "docs"
    docs.mkdir()
    for name in names:
        shutil.copy(root / "docs" / name, docs / name)
    return docs
