"""attnserve under closed-loop load: the native API and V2 (own generator and perf_analyzer), one
server per (workers, batching) setup swept over texts per call and concurrency; batching off is
`--max-batch-size 1`. perf_analyzer asks for every output, ATTENTION included: its sweep is
attention-on. The naive server and MLServer take the same load (`others`); peers.py measures
its points with the same two functions."""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.render import log_point
from bench.serving.plan import Plan
from bench.serving.texts import prepared
from kit.launch import Launched, attnserve, cpu_seconds
from kit.load import run_closed
from kit.metrics import scrape, values
from kit.perf_analyzer import run_perf_analyzer
from kit.results import Point

NATIVE, V2, PERF = "attnserve native", "attnserve V2", "attnserve V2 (perf_analyzer)"
NAIVE, MLSERVER = "naive", "MLServer"
SETUP = ("workers", "batching", "attention", "texts", "concurrency")
CpuFigures = Callable[[float, int, "float | None"], dict[str, Any]]  # (CPU s, calls, mean batch) -> fields


def batch_totals(url: str | None) -> tuple[float, float]:
    """(texts, model calls) so far, from the server's attnserve_batch_size histogram."""
    if url is None:
        return (0.0, 0.0)
    text = scrape(url)
    return sum(values(text, "attnserve_batch_size_sum")), sum(values(text, "attnserve_batch_size_count"))


class Meter:
    """A server's process-tree CPU and its batches, from the meter's start."""

    def __init__(self, server: Launched) -> None:
        self.server = server
        self.cpu, self.batches = cpu_seconds(server.pid), batch_totals(server.metrics_url)

    def read(self) -> tuple[float, float | None]:
        """(CPU seconds since, mean texts per batch since: None when no batch was counted)."""
        cpu = cpu_seconds(self.server.pid) - self.cpu
        after = batch_totals(self.server.metrics_url)
        batches = after[1] - self.batches[1]
        return cpu, (after[0] - self.batches[0]) / batches if batches > 0 else None


def load_point(
    server: Launched, api: str, model: str, texts: Sequence[str], n: int, concurrency: int, seconds: float,
    warmup: float, fields: Sequence[str] = SETUP, cpu: CpuFigures | None = None, **setup: Any,
) -> Point:  # fmt: skip
    """`n` of `texts` a call from the own generator, closed loop, as a point with the server's
    mean batch (and `cpu`'s figures), logged with its `fields`."""
    requests = prepared(api, model, texts, n, setup.get("attention", False))
    channels, meter = 8 if setup.get("workers", 1) != 1 else 4, Meter(server)
    measured = run_closed(server.target, requests, concurrency, seconds, warmup=warmup, channels=channels)
    used, mean = meter.read()
    figures = {} if cpu is None else cpu(used, measured.completed, mean)
    point = Point.of(measured, mean, concurrency=concurrency, api=api, **figures, **setup)
    return log_point(point, *fields)


def perf_point(
    server: Launched, model: str, concurrency: int, flags: Sequence[str], seconds: float, trials: int,
    fields: Sequence[str] = SETUP, cpu: CpuFigures | None = None, texts: int = 1, **setup: Any,
) -> Point:  # fmt: skip
    """One perf_analyzer run (C++ client, `flags` name its inputs and mode) with windows of
    `seconds`, retried once with 3x longer ones when it cannot settle, as a slow server's calls
    can outlast a window; a run that fails twice is a point with no throughput."""
    for window in (seconds, 3 * seconds):
        meter = Meter(server)
        done = run_perf_analyzer(server.target, model, concurrency, flags, interval_ms=int(window * 1000),
                                 trials=trials, count_calls=cpu is not None, timeout=300)  # fmt: skip
        if done.row is not None:
            break
        print(f"  perf_analyzer failed on {setup['system']} {' '.join(flags)} c={concurrency} "
              f"({window:.1f} s windows): {done.problem}", file=sys.stderr)  # fmt: skip
    used, mean = meter.read()
    figures = {} if cpu is None or done.row is None else cpu(used, done.calls, mean)
    return log_point(done.point(texts, concurrency=concurrency, mean_batch=mean, **figures, **setup), *fields)


def run(
    repository: Path, model: str, texts: Sequence[str], plan: Plan, *, native: bool, v2: bool,
    perf_analyzer: bool, has_attention: bool, work_dir: Path,
) -> list[Point]:  # fmt: skip
    data = work_dir / "perf_analyzer_texts.json"
    data.write_text(json.dumps({"data": [{"TEXT": [text]} for text in texts[:256]]}))
    points: list[Point] = []
    # The queue holds every text the sweep can offer at once (concurrency x texts per call): the
    # sweep measures throughput, not load shedding (1024 texts would shed most calls at 64 x 32).
    queue = ["--max-queue", str(max(1024, max(plan.concurrencies) * max(plan.texts_per_request)))]
    for workers, batching in itertools.product(plan.workers, (True, False)):
        setup: dict[str, Any] = {"batching": batching, "workers": workers}
        flags = queue if batching else [*queue, "--max-batch-size", "1"]
        with attnserve(repository, flags, workers=workers) as server:
            for n, c in itertools.product(plan.texts_per_request, plan.concurrencies):
                for attention in ((False, True) if has_attention else (False,)) if native else ():
                    points.append(load_point(server, "native", model, texts, n, c, plan.seconds, plan.warmup,
                                             system=NATIVE, attention=attention, **setup))  # fmt: skip
                if v2 and workers == 1 and batching:
                    points.append(load_point(server, "v2", model, texts, n, c, plan.seconds, plan.warmup,
                                             system=V2, **setup))  # fmt: skip
                if perf_analyzer and (plan.perf_every_setup or (workers, batching) == (1, True)):
                    inputs = ["--input-data", str(data), "-b", str(n), "--async"]
                    points.append(perf_point(server, model, c, inputs, plan.perf_interval_ms / 1000,
                                             max(3, plan.perf_trials), texts=n, system=PERF,
                                             attention=has_attention, **setup))  # fmt: skip
    return points


def others(
    server: Launched, api: str, model: str, texts: Sequence[str], plan: Plan, attentions: Sequence[bool],
    **setup: Any,
) -> list[Point]:  # fmt: skip
    """A server a user would pick instead (naive, MLServer) under the same closed-loop load."""
    grid = itertools.product(plan.texts_per_request, plan.concurrencies, attentions)
    return [load_point(server, api, model, texts, n, c, plan.seconds, plan.warmup, attention=a, **setup)
            for n, c, a in grid]  # fmt: skip
