"""NVIDIA's perf_analyzer, as the benchmarks run it: one concurrency level a run, its CSV row back.

perf_analyzer lives in the Triton client tools venv (tools/triton-env.sh installs it;
tools/perf-analyzer.sh finds and runs it). It drives V2 over gRPC with its C++ client, so a
V2 figure from it carries none of the Python generator's cost.
"""

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
class Run:
    """One perf_analyzer run: its CSV row (None when it failed) and, if asked, the calls it made."""

    row: dict[str, str] | None
    calls: int
    output: str  # perf_analyzer's stdout and stderr

    def ms(self, column: str) -> float:
        """A latency column of the row (perf_analyzer writes microseconds) in milliseconds."""
        assert self.row is not None
        return float(self.row[column]) / 1000

    def point(self, texts: int = 1, **setup: Any) -> Point:
        """The row as a point (perf_analyzer counts inferences: texts, not calls); none in a failed run."""
        if self.row is None:
            nan = math.nan
            return Point(rps=nan, p50_ms=nan, p99_ms=nan, texts=texts, texts_per_s=nan, error_share=1.0,
                         errors={"perf_analyzer": 1}, **setup)  # fmt: skip
        per_s = float(self.row["Inferences/Second"])
        return Point(rps=per_s / texts, texts=texts, texts_per_s=per_s, p50_ms=self.ms("p50 latency"),
                     p95_ms=self.ms("p95 latency"), p99_ms=self.ms("p99 latency"), **setup)  # fmt: skip

    @property
    def problem(self) -> str:
        """perf_analyzer's last line of output: why a failed run failed."""
        return (self.output.strip().splitlines() or ["(no output)"])[-1]


def locate() -> str | None:
    """None when perf_analyzer can run here, else why it cannot."""
    done = subprocess.run(
        ["bash", str(PERF_ANALYZER), "--locate"], capture_output=True, text=True, timeout=60
    )
    if done.returncode != 0:
        return f"perf_analyzer is not usable ({done.stderr.strip()}); run tools/triton-env.sh"
    return None


def run(
    target: str, model: str, data: Path, concurrency: int, *, interval_ms: int, trials: int,
    flags: Sequence[str] = ("--async",), count_calls: bool = False, timeout: float = 600,
) -> Run:  # fmt: skip
    """perf_analyzer against `target` at one concurrency, inputs from `data` (its JSON format).
    No stability required: on a shared machine a run waiting for stable windows may never end."""
    with tempfile.TemporaryDirectory() as folder:
        report, export = Path(folder) / "perf.csv", Path(folder) / "requests.json"
        command = [
            "bash", str(PERF_ANALYZER), "-m", model, "-u", target, "-i", "grpc", "--input-data", str(data),
            *flags, "--concurrency-range", str(concurrency), "--measurement-interval", str(interval_ms),
            "--stability-percentage", "999", "--max-trials", str(trials), "-f", str(report),
            *(["--profile-export-file", str(export)] if count_calls else []),
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        output = done.stdout + done.stderr
        if done.returncode != 0 or not report.is_file():
            return Run(None, 0, output)
        with report.open(newline="") as handle:
            (row,) = list(csv.DictReader(handle))
        experiments = json.loads(export.read_text())["experiments"] if count_calls else []
    return Run(row, sum(len(e["requests"]) for e in experiments), output)
