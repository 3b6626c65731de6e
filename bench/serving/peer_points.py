"""One point of the peer comparison: a system, a workload, a mode and a concurrency. CPU per call
is the server's process tree over the generator's whole run, over every call in it; for
attnserve also without the model's share at its mean batch (ceiling.model_cpu_per_text)."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.render import log_point
from bench.serving.ceiling import model_cpu_per_text
from bench.serving.sweep import Meter, closed
from bench.serving.texts import prepared
from bench.serving.tools import run_perf_analyzer
from kit.launch import Launched
from kit.results import Point

PERF_TRIALS = 3
FIELDS = ("api", "generator", "workload", "mode", "concurrency")  # of the progress lines


@dataclass(frozen=True)
class System:
    name: str
    launched: Launched
    model: str
    ids_model: str | None  # the model name that takes INPUT_IDS; None: no ids input
    streaming: bool
    tag: str | None = None  # "w1"/"w2" for attnserve

    @classmethod
    def attnserve(cls, tag: str, launched: Launched, model: str) -> System:
        return cls(f"attnserve {tag}", launched, model, model, True, tag)


def cpu_figures(
    cpu: float, calls: int, mean: float | None, bundle: Path, texts: Sequence[str], texts_per_call: int = 1
) -> dict[str, Any]:
    """CPU ms per call, and without the model's share when the server reported its mean batch."""
    if calls <= 0:
        return {"cpu_ms_per_call": math.nan}
    figures: dict[str, Any] = {"cpu_ms_per_call": cpu / calls * 1000}
    if mean is not None:
        model = model_cpu_per_text(bundle, tuple(texts), max(1, round(mean))) * texts_per_call
        figures["cpu_ms_per_call_no_model"] = (cpu / calls - model) * 1000
    return figures


def perf_point(
    system: System, workload: str, mode: str, concurrency: int, data: Path, seconds: float, bundle: Path
) -> Point | None:
    """One perf_analyzer run (retried once with 3x longer windows when it cannot settle, as a slow
    server's calls can outlast a window); None when the system cannot take the workload or mode."""
    model = system.ids_model if workload.startswith("ids") else system.model
    if model is None or (mode == "streaming" and not system.streaming):
        return None
    for window in (seconds, 3 * seconds):
        meter = Meter(system.launched)
        done = run_perf_analyzer(system.launched.target, model, data, concurrency,
                                 interval_ms=int(window * 1000), trials=PERF_TRIALS,
                                 flags=("--streaming",) if mode == "streaming" else ("--async",),
                                 count_calls=True, timeout=300)  # fmt: skip
        if done.row is not None:
            cpu, mean = meter.read()
            entries = json.loads(data.read_text())["data"]
            ids = "TEXT" not in entries[0]  # an ids file: its 16-token texts are beside it
            texts = (
                (data.parent / "texts16.txt").read_text().splitlines()
                if ids
                else [e["TEXT"][0] for e in entries]
            )
            point = done.point(system=system.name, concurrency=concurrency, mean_batch=mean, api="v2",
                               generator="perf_analyzer", workload=workload, mode=mode,
                               **cpu_figures(cpu, done.calls, mean, bundle, texts))  # fmt: skip
            return log_point(point, *FIELDS)
        print(f"  perf_analyzer failed on {system.name} {workload} {mode} c={concurrency} "
              f"({window:.1f} s windows): {done.problem}", file=sys.stderr)  # fmt: skip
    return None


def loadgen_point(
    system: System, api: str, texts: Sequence[str], per_call: int, concurrency: int, seconds: float,
    bundle: Path,
) -> Point:  # fmt: skip
    requests, channels = prepared(api, system.model, texts, per_call, False), 8 if system.tag == "w2" else 4
    warmup = min(0.5, seconds)
    measured, cpu, mean = closed(
        system.launched, requests, concurrency, seconds * PERF_TRIALS, warmup, channels
    )
    if measured.error_share:
        print(f"  {system.name} {api}: errors {dict(measured.errors)}", file=sys.stderr)
    workload = "text16" if per_call == 1 else f"text16x{per_call}"
    figures = cpu_figures(cpu, measured.completed, mean, bundle, texts, per_call)
    point = Point.of(measured, mean, system=system.name, concurrency=concurrency, texts=per_call, api=api,
                     workload=workload, **figures)  # fmt: skip
    return log_point(point, *FIELDS)
