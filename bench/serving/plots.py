"""The serving suite's four plots, each drawn from results.json alone."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.render import empty, figure, save
from bench.serving.results import Results
from bench.serving.sweep import MLSERVER, NAIVE, NATIVE, PERF, V2
from kit.results import Point

# (label, selection) of the lines drawn against concurrency
SERIES: list[tuple[str, dict[str, Any]]] = [
    ("native, batching on", {"system": NATIVE, "workers": 1, "batching": True, "attention": False}),
    ("native, batching off", {"system": NATIVE, "workers": 1, "batching": False, "attention": False}),
    ("native, attention on", {"system": NATIVE, "workers": 1, "batching": True, "attention": True}),
    ("native, --workers 2", {"system": NATIVE, "workers": 2, "batching": True, "attention": False}),
    ("V2 (own generator)", {"system": V2, "workers": 1, "batching": True}),
    ("V2 (perf_analyzer)", {"system": PERF, "workers": 1, "batching": True}),
    ("naive server", {"system": NAIVE, "attention": False}),
    ("MLServer", {"system": MLSERVER}),
]


def _series(results: Results, texts: int, selection: dict[str, Any]) -> list[Point]:
    points = [p for p in results.select(texts=texts, **selection) if not math.isnan(p.texts_per_s)]
    return sorted(points, key=lambda p: p.concurrency)


def _line(axis: Any, points: list[Point], key: str, *style: str, **kw: Any) -> None:
    axis.plot([p.concurrency for p in points], [getattr(p, key) for p in points], *style, **kw)


def _by_concurrency(
    results: Results, path: Path, draw: Callable[[Any, int], bool], ylabel: str, log_y: bool
) -> None:
    """A pane per texts-per-call size; `draw(axis, texts)` says whether it drew anything."""
    sizes = sorted({p.texts for p in results.points}) or [1]
    made, axes = figure(len(sizes), (6.5 * len(sizes), 4.5))
    for axis, texts in zip(axes, sizes, strict=True):
        if not draw(axis, texts):
            empty(axis, "latency" if log_y else "throughput")
            continue
        axis.set_xscale("log", base=2)
        if log_y:
            axis.set_yscale("log")
        axis.set(xlabel="concurrent calls", ylabel=ylabel, title=f"{texts} text(s) per call")
        axis.grid(alpha=0.3, which="both")
        axis.legend(fontsize=7)
    save(made, path)


def throughput(results: Results, path: Path) -> None:
    ceiling = max((row.included for row in results.ceiling), default=None)

    def draw(axis: Any, texts: int) -> bool:
        drawn = [(label, _series(results, texts, selection)) for label, selection in SERIES]
        for label, points in drawn:
            if points:
                _line(axis, points, "texts_per_s", marker="o", label=label)
        if ceiling and any(points for _, points in drawn):
            axis.axhline(ceiling, color="black", linestyle="--", linewidth=1, label="ceiling (onnxruntime)")
        return any(points for _, points in drawn)

    _by_concurrency(results, path, draw, "texts per second", log_y=False)


def latency(results: Results, path: Path) -> None:
    def draw(axis: Any, texts: int) -> bool:
        native = _series(results, texts, SERIES[0][1])
        for key, style in (("p50_ms", ":"), ("p95_ms", "--"), ("p99_ms", "-")) if native else ():
            _line(axis, native, key, style, marker="o", color="C0", label=f"native {key[:3]}")
        for index, (label, selection) in enumerate((SERIES[1], SERIES[6], SERIES[7]) if native else (), 1):
            if points := _series(results, texts, selection):
                _line(axis, points, "p99_ms", marker="s", color=f"C{index}", label=f"{label} p99")
        return bool(native)

    _by_concurrency(results, path, draw, "latency (ms)", log_y=True)


def memory(results: Results, path: Path) -> None:
    made, (axis,) = figure()
    m = results.memory
    if m is None or not m.samples:
        empty(axis, "memory")
    else:
        for phase in dict.fromkeys(s.phase for s in m.samples):
            chosen = [s for s in m.samples if s.phase == phase]
            axis.plot([s.seconds for s in chosen], [s.rss_mb for s in chosen], marker=".", label=phase)
        axis.set(xlabel="seconds since the server was ready", ylabel="RSS (MB)")
        axis.set_title(f"attnserve RSS: {m.requests:,} calls, then a {m.soak_seconds:.0f} s soak at "
                       f"{m.soak_rate:.0f} calls/s (70% of capacity)", fontsize=9)  # fmt: skip
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    save(made, path)


def seqlen(results: Results, path: Path) -> None:
    made, axes = figure(3, (16, 4.2))
    s = results.seqlen
    if s is None or not s.raw_texts_per_s:
        for axis in axes:
            empty(axis, "text length")
        return save(made, path)
    lengths = sorted(s.raw_texts_per_s)
    served = [t for t in lengths if t in s.service]
    axes[0].plot(lengths, [s.raw_texts_per_s[t] for t in lengths], marker="o", label="onnxruntime, batch 32")
    axes[0].plot(served, [s.service[t].texts_per_s for t in served], marker="s", label="attnserve native")
    axes[0].set(xlabel="tokens per text", ylabel="texts per second", yscale="log")
    for key, style in (("p50_ms", ":"), ("p99_ms", "-")):
        axes[1].plot(served, [getattr(s.service[t], key) for t in served], style, marker="o", label=key[:3])
    axes[1].set(xlabel="tokens per text", ylabel="attnserve latency (ms)")
    names = list(s.padding)
    axes[2].barh(range(len(names)), [s.padding[n] for n in names])
    axes[2].set_yticks(range(len(names)), [n.replace(", ", ",\n") for n in names], fontsize=7)
    axes[2].set_xlabel("texts per second (mixed lengths, batches of 32)")
    for axis in axes:
        axis.grid(alpha=0.3)
    for axis in axes[:2]:
        axis.legend(fontsize=8)
    save(made, path)


PLOTS: dict[str, tuple[str, Callable[[Results, Path], None]]] = {
    "throughput_vs_concurrency.png": ("Throughput against concurrency", throughput),
    "latency_vs_concurrency.png": ("Latency percentiles against concurrency", latency),
    "rss_over_time.png": ("Server memory over time", memory),
    "throughput_vs_seqlen.png": ("Throughput and latency against text length", seqlen),
}
