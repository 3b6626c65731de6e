"""Measuring one point of the peer comparison: a system, a workload, a mode and a concurrency.

CPU per call is the server's process tree over the generator's whole run, over every call in
it; for attnserve the model's share at its mean batch is taken out (bench/serving/model_cost.py).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.serving import perf_analyzer
from bench.serving.model_cost import model_cpu_per_text
from bench.serving.sweep import batch_totals
from bench.serving.texts import prepared
from kit.launch import Launched, cpu_seconds
from kit.load import run_closed
from kit.results import Point

PERF_TRIALS = 3


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

    @classmethod
    def peer(
        cls, name: str, launched: Launched, model: str, ids_model: str | None, *, streaming: bool
    ) -> System:
        return cls(name, launched, model, ids_model, streaming)


class CpuMeter:
    """The server tree's CPU (and, for attnserve, its batches) from here to `per_call`."""

    def __init__(self, launched: Launched, bundle: Path, texts: Sequence[str]) -> None:
        self.launched, self.bundle, self.texts = launched, bundle, tuple(texts)
        self.cpu = cpu_seconds(launched.pid)
        self.batches = batch_totals(launched.metrics_url)

    def per_call(self, calls: int, texts_per_call: int = 1) -> tuple[float, float | None, float | None]:
        """(CPU ms per call, the same without the model's share, mean texts per batch)."""
        cpu = cpu_seconds(self.launched.pid) - self.cpu
        if calls <= 0:
            return math.nan, None, None
        after = batch_totals(self.launched.metrics_url)
        texts, batches = after[0] - self.batches[0], after[1] - self.batches[1]
        if batches <= 0:  # no metrics port (a peer), or no batch counted
            return cpu / calls * 1000, None, None
        mean = texts / batches
        model = model_cpu_per_text(self.bundle, self.texts, max(1, round(mean))) * texts_per_call
        return cpu / calls * 1000, (cpu / calls - model) * 1000, mean


def perf_point(
    system: System, workload: str, mode: str, concurrency: int, data: Path, seconds: float, bundle: Path
) -> Point | None:
    """One perf_analyzer run (retried once with 3x longer windows when it cannot settle, as a slow
    server's calls can outlast a window); None when the system cannot take the workload or mode."""
    model = system.ids_model if workload.startswith("ids") else system.model
    if model is None or (mode == "streaming" and not system.streaming):
        return None
    for window in (seconds, 3 * seconds):
        meter = CpuMeter(system.launched, bundle, _texts_of(data))
        flags = ("--streaming",) if mode == "streaming" else ("--async",)
        done = perf_analyzer.run(system.launched.target, model, data, concurrency,
                                 interval_ms=int(window * 1000), trials=PERF_TRIALS, flags=flags,
                                 count_calls=True, timeout=300)  # fmt: skip
        if done.row is not None:
            cpu, without, mean = meter.per_call(done.calls)
            point = done.point(system=system.name, concurrency=concurrency, mean_batch=mean, api="v2",
                               generator="perf_analyzer", workload=workload, mode=mode, cpu_ms_per_call=cpu,
                               cpu_ms_per_call_no_model=without)  # fmt: skip
            return log(point)
        print(
            f"  perf_analyzer failed on {system.name} {workload} {mode} c={concurrency} "
            f"({window:.1f} s windows): {done.problem}",
            file=sys.stderr,
        )
    return None


def _texts_of(data: Path) -> list[str]:
    """The sentences of a perf_analyzer input file (ids files: their 16-token texts beside them)."""
    entries = json.loads(data.read_text())["data"]
    if "TEXT" in entries[0]:
        return [entry["TEXT"][0] for entry in entries]
    return (data.parent / "texts16.txt").read_text().splitlines()


def loadgen_point(
    system: System,
    api: str,
    texts: Sequence[str],
    per_call: int,
    concurrency: int,
    seconds: float,
    bundle: Path,
) -> Point:
    requests = prepared(api, system.model, texts, per_call, False)
    meter = CpuMeter(system.launched, bundle, texts)
    target, channels = system.launched.target, 8 if system.tag == "w2" else 4
    measured = run_closed(
        target, requests, concurrency, seconds * PERF_TRIALS, warmup=min(0.5, seconds), channels=channels
    )
    cpu, without, mean = meter.per_call(measured.completed, per_call)
    if measured.error_share:
        print(f"  {system.name} {api}: errors {dict(measured.errors)}", file=sys.stderr)
    workload = "text16" if per_call == 1 else f"text16x{per_call}"
    point = Point.of(
        measured, mean, system=system.name, concurrency=concurrency, texts=per_call, api=api,
        workload=workload, cpu_ms_per_call=cpu, cpu_ms_per_call_no_model=without,
    )  # fmt: skip
    return log(point)


def log(point: Point) -> Point:
    without = point.cpu_ms_per_call_no_model
    without_text = "" if without is None else f" ({without:.3f} w/o model)"
    print(
        f"  {point.system:<14} {point.api:<6} {point.generator:<13} {point.workload:<10} {point.mode:<9} "
        f"c={point.concurrency:<3} {point.rps:8.0f} calls/s  p50 {point.p50_ms:6.2f} ms  "
        f"p99 {point.p99_ms:6.2f} ms  cpu {point.cpu_ms_per_call:.3f} ms/call{without_text}",
        file=sys.stderr,
        flush=True,
    )
    return point
