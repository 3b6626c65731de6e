"""attnserve under closed-loop load: the native API and V2 (own generator and perf_analyzer), one
server per (workers, batching) setup swept over texts per call and concurrency; batching off is
`--max-batch-size 1`. perf_analyzer asks for every output, ATTENTION included: its sweep is
attention-on. The naive server and MLServer take the same load (`others`)."""

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
from kit.load import Requests, run_closed
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


def closed_point(
    server: Launched, requests: Requests, concurrency: int, seconds: float, warmup: float, channels: int,
    fields: Sequence[str], cpu: CpuFigures | None = None, **setup: Any,
) -> Point:  # fmt: skip
    """A closed-loop run as a point with the server's mean batch (and `cpu`'s figures), logged
    with its `fields`."""
    meter = Meter(server)
    measured = run_closed(server.target, requests, concurrency, seconds, warmup=warmup, channels=channels)
    used, mean = meter.read()
    figures = {} if cpu is None else cpu(used, measured.completed, mean)
    return log_point(Point.of(measured, mean, concurrency=concurrency, **figures, **setup), *fields)


def load_point(
    server: Launched, api: str, model: str, texts: Sequence[str], n: int, attention: bool, concurrency: int,
    plan: Plan, **setup: Any,
) -> Point:  # fmt: skip
    requests, channels = prepared(api, model, texts, n, attention), 8 if setup.get("workers", 1) != 1 else 4
    return closed_point(server, requests, concurrency, plan.seconds, plan.warmup, channels, SETUP,
                        attention=attention, texts=n, **setup)  # fmt: skip


def perf_point(
    target: str, model: str, data: Path, n: int, concurrency: int, plan: Plan, **setup: Any
) -> Point:
    """One perf_analyzer run (--async, C++ client); a failed run is a point with no throughput."""
    flags = ("--input-data", str(data), "--async", "-b", str(n))
    done = run_perf_analyzer(target, model, concurrency, flags, interval_ms=plan.perf_interval_ms,
                             trials=max(3, plan.perf_trials))  # fmt: skip
    if done.row is None:
        print(f"perf_analyzer failed at b={n} c={concurrency}: {done.output[-600:]}", file=sys.stderr)
    return log_point(done.point(n, concurrency=concurrency, **setup), *SETUP)


def run(
    repository: Path, model: str, texts: Sequence[str], plan: Plan, *, native: bool, v2: bool,
    perf_analyzer: bool, has_attention: bool, work_dir: Path,
) -> list[Point]:  # fmt: skip
    data = work_dir / "perf_analyzer_texts.json"
    data.write_text(json.dumps({"data": [{"TEXT": [text]} for text in texts[:256]]}))
    points: list[Point] = []
    attentions = (False, True) if has_attention else (False,)
    # The queue holds every text the sweep can offer at once (concurrency x texts per call): the
    # sweep measures throughput, not load shedding (1024 texts would shed most calls at 64 x 32).
    queue = ["--max-queue", str(max(1024, max(plan.concurrencies) * max(plan.texts_per_request)))]
    for workers, batching in itertools.product(plan.workers, (True, False)):
        setup = {"batching": batching, "workers": workers}
        flags = queue if batching else [*queue, "--max-batch-size", "1"]
        with attnserve(repository, flags, workers=workers) as server:
            for n, c in itertools.product(plan.texts_per_request, plan.concurrencies):
                for attention in attentions if native else ():
                    points.append(load_point(server, "native", model, texts, n, attention, c, plan,
                                             system=NATIVE, **setup))  # fmt: skip
                if v2 and workers == 1 and batching:
                    points.append(load_point(server, "v2", model, texts, n, False, c, plan, system=V2,
                                             **setup))  # fmt: skip
                if perf_analyzer and (plan.perf_every_setup or (workers, batching) == (1, True)):
                    points.append(perf_point(server.target, model, data, n, c, plan, system=PERF,
                                             attention=has_attention, **setup))  # fmt: skip
    return points


def others(
    server: Launched, api: str, model: str, texts: Sequence[str], plan: Plan, attentions: Sequence[bool],
    **setup: Any,
) -> list[Point]:  # fmt: skip
    """A server a user would pick instead (naive, MLServer) under the same closed-loop load."""
    grid = itertools.product(plan.texts_per_request, plan.concurrencies, attentions)
    return [load_point(server, api, model, texts, n, a, c, plan, workers=1, **setup) for n, c, a in grid]
