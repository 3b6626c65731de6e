"""attnserve under closed-loop load: the native API and V2 (own generator and perf_analyzer).

One server per (workers, batching) setup, each swept over texts per call and concurrency;
batching off is `--max-batch-size 1`, and the queue holds the largest offered load so no call
is shed. perf_analyzer asks for every output, ATTENTION included: its sweep is attention-on.
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.serving import perf_analyzer
from bench.serving.plan import Plan
from bench.serving.texts import prepared
from kit.launch import Launched, attnserve
from kit.load import run_closed
from kit.metrics import scrape, values
from kit.results import Point

NATIVE, V2, PERF = "attnserve native", "attnserve V2", "attnserve V2 (perf_analyzer)"
NAIVE, MLSERVER = "naive", "MLServer"


def batch_totals(url: str | None) -> tuple[float, float]:
    """(texts, model calls) so far, from the server's attnserve_batch_size histogram."""
    if url is None:
        return (0.0, 0.0)
    text = scrape(url)
    return sum(values(text, "attnserve_batch_size_sum")), sum(values(text, "attnserve_batch_size_count"))


def _mean_batch(before: tuple[float, float], after: tuple[float, float]) -> float | None:
    calls = after[1] - before[1]
    return (after[0] - before[0]) / calls if calls > 0 else None


def closed_point(
    server: Launched, api: str, model: str, texts: Sequence[str], n: int, attention: bool, concurrency: int,
    plan: Plan, **setup: object,
) -> Point:  # fmt: skip
    requests = prepared(api, model, texts, n, attention)
    before = batch_totals(server.metrics_url)
    measured = run_closed(server.target, requests, concurrency, plan.seconds, warmup=plan.warmup,
                          channels=8 if setup.get("workers", 1) != 1 else 4)  # fmt: skip
    mean = _mean_batch(before, batch_totals(server.metrics_url))
    return log_point(Point.of(measured, mean, attention=attention, texts=n, concurrency=concurrency, **setup))


def perf_point(
    target: str, model: str, data: Path, n: int, concurrency: int, plan: Plan, **setup: Any
) -> Point:
    """One perf_analyzer run (--async, C++ client), logged; a failed run is a point with no throughput."""
    done = perf_analyzer.run(target, model, data, concurrency, interval_ms=plan.perf_interval_ms,
                             trials=max(3, plan.perf_trials), flags=("--async", "-b", str(n)))  # fmt: skip
    if done.row is None:
        print(f"perf_analyzer failed at b={n} c={concurrency}: {done.output[-600:]}", file=sys.stderr)
    return log_point(done.point(n, concurrency=concurrency, **setup))


def run(
    repository: Path, model: str, texts: Sequence[str], plan: Plan, *, native: bool, v2: bool,
    perf_analyzer: bool, has_attention: bool, work_dir: Path,
) -> list[Point]:  # fmt: skip
    data = work_dir / "perf_analyzer_texts.json"
    data.write_text(json.dumps({"data": [{"TEXT": [text]} for text in texts[:256]]}))
    points: list[Point] = []
    attentions = (False, True) if has_attention else (False,)
    # The queue holds every text the sweep can offer at once (concurrency x texts per call):
    # the sweep measures throughput and latency, not load shedding (the default of 1024
    # texts would answer most calls at 64 x 32 RESOURCE_EXHAUSTED).
    queue = ["--max-queue", str(max(1024, max(plan.concurrencies) * max(plan.texts_per_request)))]
    for workers in plan.workers:
        for batching in (True, False):
            flags = queue if batching else [*queue, "--max-batch-size", "1"]
            setup = {"batching": batching, "workers": workers}
            with attnserve(repository, flags, workers=workers) as server:
                for n, c in itertools.product(plan.texts_per_request, plan.concurrencies):
                    for attention in attentions if native else ():
                        points.append(closed_point(server, "native", model, texts, n, attention, c, plan,
                                                   system=NATIVE, **setup))  # fmt: skip
                    if v2 and workers == 1 and batching:
                        points.append(
                            closed_point(server, "v2", model, texts, n, False, c, plan, system=V2, **setup)
                        )
                    if perf_analyzer and (plan.perf_every_setup or (workers, batching) == (1, True)):
                        points.append(perf_point(server.target, model, data, n, c, plan, system=PERF,
                                                 attention=has_attention, **setup))  # fmt: skip
    return points


def log_point(point: Point) -> Point:
    print(
        f"  {point.system:<30} w={point.workers} batching={'on ' if point.batching else 'off'} "
        f"attention={'on ' if point.attention else 'off'} texts={point.texts:<2} c={point.concurrency:<3} "
        f"{point.texts_per_s:8.0f} texts/s  p50 {point.p50_ms:7.2f} ms  p99 {point.p99_ms:7.2f} ms"
        f"  errors {point.error_share:.1%}",
        file=sys.stderr,
        flush=True,
    )
    return point


def others(
    server: Launched,
    api: str,
    model: str,
    texts: Sequence[str],
    plan: Plan,
    attentions: Sequence[bool],
    **setup: Any,
) -> list[Point]:
    """The alternatives a user would pick instead under the same closed-loop load: the naive
    baseline server (systems/naive_server.py, native API) and MLServer (systems/mlserver.py,
    V2 with TEXT in, LABEL and PROBABILITIES out, adaptive batching up to 32 texts)."""
    grid = itertools.product(plan.texts_per_request, plan.concurrencies, attentions)
    return [closed_point(server, api, model, texts, n, a, c, plan, workers=1, **setup) for n, c, a in grid]
