"""What a serving benchmark measured, as plain dataclasses: one `Point` per measurement, for
the suite's results.json and the peer comparison's peers.json alike."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.serving.ceiling import CeilingRow
from bench.serving.loadgen import Measurement


@dataclass(frozen=True)
class Point:
    """One closed-loop measurement of one server setup at one concurrency: the serving suite's
    (results.json) and the peer comparison's (peers.json, which also fills api, generator,
    workload, mode and the server tree's CPU per call)."""

    system: str  # attnserve native | attnserve V2 | ... | naive | MLServer | floor | PyTriton | attnserve w1
    concurrency: int
    rps: float  # successful calls per second
    p50_ms: float
    p99_ms: float
    texts: int = 1  # per call
    texts_per_s: float = math.nan
    p95_ms: float = math.nan
    error_share: float = 0.0
    errors: dict[str, int] = field(default_factory=dict)
    mean_batch: float | None = None  # texts per model call on the server, when it reports it
    batching: bool = True
    attention: bool = False
    workers: int = 1
    api: str = "native"  # "native" or "v2"
    generator: str = "own"  # "own" (bench/serving/loadgen.py) or "perf_analyzer"
    workload: str = ""  # peers: text16, text64, ids16, or text16x32 (32 texts per call)
    mode: str = "unary"  # or "streaming"
    cpu_ms_per_call: float = math.nan  # the server's whole process tree
    cpu_ms_per_call_no_model: float | None = None  # the same with the model's share taken out

    @classmethod
    def of(cls, m: Measurement, mean_batch: float | None = None, **setup: Any) -> Point:
        return cls(
            rps=m.rps, texts_per_s=m.texts_per_s, p50_ms=m.percentile(50), p95_ms=m.percentile(95),
            p99_ms=m.percentile(99), error_share=m.error_share, errors=dict(m.errors), mean_batch=mean_batch,
            **setup,
        )  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Point:
        """A point as results.json or peers.json hold it (peers.json from before the two kinds of
        point were one: `calls_per_s` and `texts_per_call`)."""
        renamed = {"calls_per_s": "rps", "texts_per_call": "texts"}
        return cls(**{renamed.get(key, key): value for key, value in data.items()})

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


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
        found = self.select(**setup)
        return found[0] if found else None

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1, default=str, allow_nan=True) + "\n")

    @classmethod
    def read(cls, path: Path) -> Results:
        """A run's results.json back as objects (to render or publish it again)."""
        data = json.loads(path.read_text())
        memory, seqlen = data.pop("memory"), data.pop("seqlen")
        results = cls(**{**data, "ceiling": [CeilingRow(**row) for row in data["ceiling"]],
                         "points": [Point.from_dict(point) for point in data["points"]]})  # fmt: skip
        if memory is not None:
            samples = [RssSample(**sample) for sample in memory.pop("samples")]
            results.memory = Memory(**memory, samples=samples)
        if seqlen is not None:
            results.seqlen = SeqLen(
                raw_texts_per_s={int(k): v for k, v in seqlen["raw_texts_per_s"].items()},
                service={int(k): Point.from_dict(v) for k, v in seqlen["service"].items()},
                padding=seqlen["padding"],
            )
        return results
