"""What the serving suite measured (results.json): kit's `Point`s, the sections' own figures and
the machine they ran on (also the explain section's header)."""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
from dataclasses import asdict, dataclass, field
from importlib.metadata import distributions
from pathlib import Path
from typing import Any

import psutil

from bench.serving.ceiling import CeilingRow
from kit.launch import ROOT
from kit.results import Point

PACKAGES = ("onnxruntime", "grpcio", "tokenizers", "numpy", "protobuf", "locust")


@dataclass(frozen=True)
class RssSample:
    phase: str  # idle | requests | soak
    seconds: float  # since the server was ready
    rss_mb: float


@dataclass
class Memory:
    idle_mb: float = math.nan
    after_requests_mb: float = math.nan
    requests: int = 0
    soak_rate: float = 0.0  # calls per second during the soak
    capacity: float = 0.0  # calls per second measured before the soak
    soak_seconds: float = 0.0
    soak_start_mb: float = math.nan
    soak_end_mb: float = math.nan
    slope_mb_per_min: float = math.nan  # least-squares slope over the soak's second half
    soak_error_share: float = 0.0
    soak_errors: dict[str, int] = field(default_factory=dict)  # status -> calls during the soak
    samples: list[RssSample] = field(default_factory=list)


@dataclass
class SeqLen:
    raw_texts_per_s: dict[int, float] = field(default_factory=dict)  # T -> onnxruntime at batch 32
    service: dict[int, Point] = field(default_factory=dict)  # T -> attnserve native
    padding: dict[str, float] = field(default_factory=dict)  # plan -> texts/s (raw onnxruntime)


@dataclass
class Results:
    mode: str
    started: str
    machine: dict[str, Any]
    model: dict[str, Any]
    ceiling: list[CeilingRow] = field(default_factory=list)
    points: list[Point] = field(default_factory=list)
    memory: Memory | None = None
    seqlen: SeqLen | None = None
    profile: dict[str, Any] | None = None
    skipped: dict[str, str] = field(default_factory=dict)  # section -> why it was not measured
    seconds: dict[str, float] = field(default_factory=dict)  # section -> wall time
    command: str = ""  # the command line that made the run (runs from before it was kept: "")

    def select(self, **setup: Any) -> list[Point]:
        return [p for p in self.points if all(getattr(p, k) == v for k, v in setup.items())]

    def one(self, **setup: Any) -> Point | None:
        return next(iter(self.select(**setup)), None)

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1, default=str, allow_nan=True) + "\n")

    @classmethod
    def read(cls, path: Path) -> Results:
        """A run's results.json back as objects (to render or publish it again)."""
        data = json.loads(path.read_text())
        if (memory := data["memory"]) is not None:
            data["memory"] = Memory(**{**memory, "samples": [RssSample(**s) for s in memory["samples"]]})
        if (seqlen := data["seqlen"]) is not None:
            data["seqlen"] = SeqLen({int(k): v for k, v in seqlen["raw_texts_per_s"].items()},
                                    {int(k): Point.from_dict(v) for k, v in seqlen["service"].items()},
                                    seqlen["padding"])  # fmt: skip
        return cls(**{**data, "ceiling": [CeilingRow(**row) for row in data["ceiling"]],
                      "points": [Point.from_dict(point) for point in data["points"]]})  # fmt: skip


def describe() -> dict[str, Any]:
    """The machine a benchmark ran on, for its report's header."""
    cpu = platform.processor() or platform.machine()
    if os.path.isfile("/proc/cpuinfo"):
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        cpu = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), cpu)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout
    changes = " (uncommitted changes)" if dirty.strip() else ""
    installed = {str(d.metadata["Name"]).lower(): d.version for d in distributions()}
    return {
        "cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "os": f"{platform.system()} {platform.release()}", "python": platform.python_version(),
        "packages": {name: installed.get(name, "-") for name in PACKAGES},
        "commit": "-" if commit.returncode else commit.stdout.strip() + changes,
    }  # fmt: skip


def one_line(machine: dict[str, Any]) -> str:
    load = ", ".join(str(x) for x in machine["load_average"])
    return (
        f"{machine['cpu']}, {machine['cores']} cores, {machine['memory_gib']} GiB, {machine['os']}, "
        f"Python {machine['python']}, onnxruntime {machine['packages']['onnxruntime']}, "
        f"grpcio {machine['packages']['grpcio']}; load average at start {load}; commit {machine['commit']}"
    )
