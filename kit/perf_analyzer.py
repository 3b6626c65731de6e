"""NVIDIA's perf_analyzer (the C++ client of the Triton tools environment, run by
tools/perf-analyzer.sh) at one concurrency over gRPC: its CSV row, the calls it made, its output."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.launch import ROOT
from kit.results import Point

PERF_ANALYZER = ROOT / "tools" / "perf-analyzer.sh"


@dataclass(frozen=True)
class PerfRun:
    """One run: its CSV row (None when it failed), the calls it made (if counted), its output."""

    row: dict[str, str] | None
    calls: int
    output: str

    def point(self, texts: int = 1, **setup: Any) -> Point:
        """The row as a point (perf_analyzer counts inferences: texts, not calls); none in a failed run."""
        if self.row is None:
            nan = math.nan
            return Point(rps=nan, p50_ms=nan, p99_ms=nan, texts=texts, texts_per_s=nan, error_share=1.0,
                         errors={"perf_analyzer": 1}, **setup)  # fmt: skip
        per_s = float(self.row["Inferences/Second"])
        ms: dict[str, Any] = {f"p{q}_ms": float(self.row[f"p{q} latency"]) / 1000 for q in (50, 95, 99)}  # µs
        return Point(rps=per_s / texts, texts=texts, texts_per_s=per_s, **ms, **setup)

    @property
    def problem(self) -> str:
        """perf_analyzer's last line of output: why a failed run failed."""
        return (self.output.strip().splitlines() or ["(no output)"])[-1]


def run_perf_analyzer(
    target: str, model: str, concurrency: int, flags: Sequence[str], *, interval_ms: int, trials: int,
    count_calls: bool = False, timeout: float = 600, script: Path = PERF_ANALYZER, report: Path | None = None,
) -> PerfRun:  # fmt: skip
    """perf_analyzer against `target` at one concurrency, `flags` naming its inputs (--input-data)
    and its mode, its CSV at `report` (default: a temporary file). No stability required: on a
    shared machine a run waiting for stable windows may never end."""
    with tempfile.TemporaryDirectory() as folder:
        report, export = report or Path(folder) / "perf.csv", Path(folder) / "requests.json"
        command = [
            "bash", str(script), "-m", model, "-u", target, "-i", "grpc", *flags,
            "--concurrency-range", str(concurrency), "--measurement-interval", str(interval_ms),
            "--stability-percentage", "999", "--max-trials", str(trials), "-f", str(report),
            *(["--profile-export-file", str(export)] if count_calls else []),
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        output = done.stdout + done.stderr
        if done.returncode != 0 or not report.is_file():
            return PerfRun(None, 0, output)
        with report.open(newline="") as handle:
            (row,) = list(csv.DictReader(handle))
        experiments = json.loads(export.read_text())["experiments"] if count_calls else []
    return PerfRun(row, sum(len(e["requests"]) for e in experiments), output)
