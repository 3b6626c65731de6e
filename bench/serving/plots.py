"""The report's PNGs (matplotlib, Agg backend). A plot whose data was not measured says so."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from bench.serving.compare import MLSERVER, NAIVE
from bench.serving.results import Point, Results
from bench.serving.sweep import NATIVE, PERF, V2

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


def _empty(axis: Any, what: str) -> None:
    axis.text(
        0.5, 0.5, f"{what}: not measured in this run", ha="center", va="center", transform=axis.transAxes
    )
    axis.set_xticks([])
    axis.set_yticks([])


def _save(figure: Any, path: Path) -> None:
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def throughput(results: Results, path: Path) -> None:
    sizes = sorted({p.texts for p in results.points}) or [1]
    figure, axes = plt.subplots(1, len(sizes), figsize=(6.5 * len(sizes), 4.5), squeeze=False)
    ceiling = max((row.included for row in results.ceiling), default=None)
    for axis, texts in zip(axes[0], sizes, strict=True):
        drawn = False
        for label, selection in SERIES:
            points = _series(results, texts, selection)
            if points:
                axis.plot(
                    [p.concurrency for p in points], [p.texts_per_s for p in points], marker="o", label=label
                )
                drawn = True
        if not drawn:
            _empty(axis, "throughput")
            continue
        if ceiling:
            axis.axhline(ceiling, color="black", linestyle="--", linewidth=1, label="ceiling (onnxruntime)")
        axis.set_xscale("log", base=2)
        axis.set_xlabel("concurrent calls")
        axis.set_ylabel("texts per second")
        axis.set_title(f"{texts} text(s) per call")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    _save(figure, path)


def latency(results: Results, path: Path) -> None:
    sizes = sorted({p.texts for p in results.points}) or [1]
    figure, axes = plt.subplots(1, len(sizes), figsize=(6.5 * len(sizes), 4.5), squeeze=False)
    for axis, texts in zip(axes[0], sizes, strict=True):
        native = _series(results, texts, SERIES[0][1])
        if not native:
            _empty(axis, "latency")
            continue
        for key, style in (("p50_ms", ":"), ("p95_ms", "--"), ("p99_ms", "-")):
            axis.plot([p.concurrency for p in native], [getattr(p, key) for p in native], style, marker="o",
                      color="C0", label=f"native {key[:3]}")  # fmt: skip
        for index, (label, selection) in enumerate((SERIES[1], SERIES[6], SERIES[7]), start=1):
            points = _series(results, texts, selection)
            if points:
                axis.plot([p.concurrency for p in points], [p.p99_ms for p in points], marker="s",
                          color=f"C{index}", label=f"{label} p99")  # fmt: skip
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xlabel("concurrent calls")
        axis.set_ylabel("latency (ms)")
        axis.set_title(f"{texts} text(s) per call")
        axis.grid(alpha=0.3, which="both")
        axis.legend(fontsize=7)
    _save(figure, path)


def memory(results: Results, path: Path) -> None:
    figure, axis = plt.subplots(figsize=(8, 4.2))
    m = results.memory
    if m is None or not m.samples:
        _empty(axis, "memory")
    else:
        for phase in dict.fromkeys(s.phase for s in m.samples):
            chosen = [s for s in m.samples if s.phase == phase]
            axis.plot([s.seconds for s in chosen], [s.rss_mb for s in chosen], marker=".", label=phase)
        axis.set_xlabel("seconds since the server was ready")
        axis.set_ylabel("RSS (MB)")
        axis.set_title(f"attnserve RSS: {m.requests:,} calls, then a {m.soak_seconds:.0f} s soak at "
                       f"{m.soak_rate:.0f} calls/s (70% of capacity)", fontsize=9)  # fmt: skip
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    _save(figure, path)


def seqlen(results: Results, path: Path) -> None:
    figure, axes = plt.subplots(1, 3, figsize=(16, 4.2))
    s = results.seqlen
    if s is None or not s.raw_texts_per_s:
        for axis in axes:
            _empty(axis, "text length")
    else:
        lengths = sorted(s.raw_texts_per_s)
        axes[0].plot(
            lengths, [s.raw_texts_per_s[t] for t in lengths], marker="o", label="onnxruntime, batch 32"
        )
        served = [t for t in lengths if t in s.service]
        axes[0].plot(served, [s.service[t].texts_per_s for t in served], marker="s", label="attnserve native")
        axes[0].set_xlabel("tokens per text")
        axes[0].set_ylabel("texts per second")
        axes[0].set_yscale("log")
        axes[0].legend(fontsize=8)
        for key, style in (("p50_ms", ":"), ("p99_ms", "-")):
            axes[1].plot(
                served, [getattr(s.service[t], key) for t in served], style, marker="o", label=key[:3]
            )
        axes[1].set_xlabel("tokens per text")
        axes[1].set_ylabel("attnserve latency (ms)")
        axes[1].legend(fontsize=8)
        names = list(s.padding)
        axes[2].barh(range(len(names)), [s.padding[n] for n in names])
        axes[2].set_yticks(range(len(names)), [n.replace(", ", ",\n") for n in names], fontsize=7)
        axes[2].set_xlabel("texts per second (mixed lengths, batches of 32)")
        for axis in axes:
            axis.grid(alpha=0.3)
    _save(figure, path)


def draw_all(results: Results, folder: Path) -> list[Path]:
    paths = []
    for name, draw in (("throughput_vs_concurrency.png", throughput), ("latency_vs_concurrency.png", latency),
                       ("rss_over_time.png", memory), ("throughput_vs_seqlen.png", seqlen)):  # fmt: skip
        path = folder / name
        draw(results, path)
        paths.append(path)
    return paths
