"""What a measurement of a server found, as one plain dataclass: a `Point` per server setup,
load and concurrency, for every benchmark's JSON and table alike."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from kit.load import Measurement


@dataclass(frozen=True)
class Point:
    """One closed-loop measurement of one server setup at one concurrency. The setup fields a
    benchmark does not vary keep their defaults."""

    system: (
        str  # attnserve native | attnserve V2 | ... | naive | MLServer | floor | PyTriton | a path, a layer
    )
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
    generator: str = "own"  # "own" (kit/load.py) or "perf_analyzer"
    workload: str = ""  # peers: text16, text64, ids16, or text16x32 (32 texts per call)
    mode: str = "unary"  # or "streaming"
    cpu_ms_per_call: float = math.nan  # the server's whole process tree
    cpu_ms_per_call_no_model: float | None = None  # the same with the model's share taken out
    cpu_ms_event_loop: float | None = None  # the event-loop thread's part, measured in process
    calls: int = 0  # successful calls measured
    tracing: str = "off"  # or the sampling ratio spans were exported at

    @classmethod
    def of(cls, m: Measurement, mean_batch: float | None = None, **setup: Any) -> Point:
        setup = {"texts": m.texts_per_request, **setup}
        return cls(
            rps=m.rps, texts_per_s=m.texts_per_s, p50_ms=m.percentile(50), p95_ms=m.percentile(95),
            p99_ms=m.percentile(99), error_share=m.error_share, errors=dict(m.errors), mean_batch=mean_batch,
            calls=m.ok, **setup,
        )  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Point:
        """A point as a results file holds it (peers.json from before the two kinds of point
        were one: `calls_per_s` and `texts_per_call`)."""
        renamed = {"calls_per_s": "rps", "texts_per_call": "texts"}
        return cls(**{renamed.get(key, key): value for key, value in data.items()})

    def as_dict(self) -> dict[str, object]:
        return asdict(self)
