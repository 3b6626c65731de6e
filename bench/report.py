"""The benchmark report: key ratios first, then every measured table, as markdown."""

from __future__ import annotations

import math
from collections.abc import Iterable

from bench.compare import MLSERVER, NAIVE
from bench.machine import one_line
from bench.results import Point, Results
from bench.sweep import NATIVE, PERF, V2

PLOTS = {
    "throughput_vs_concurrency.png": "Throughput against concurrency",
    "latency_vs_concurrency.png": "Latency percentiles against concurrency",
    "rss_over_time.png": "Server memory over time",
    "throughput_vs_seqlen.png": "Throughput and latency against text length",
}


def num(value: float | None, digits: int = 0) -> str:
    if value is None or math.isnan(value):
        return "n/a"
    return f"{value:,.{digits}f}"


def ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or math.isnan(a) or math.isnan(b) or b == 0:
        return "n/a"
    return f"{a / b:.2f}x"


def best(points: Iterable[Point]) -> Point | None:
    candidates = [p for p in points if not math.isnan(p.texts_per_s)]
    return max(candidates, key=lambda p: p.texts_per_s) if candidates else None


def _tps(point: Point | None) -> float | None:
    return None if point is None else point.texts_per_s


def _where(point: Point | None) -> str:
    if point is None:
        return "not measured"
    return (f"{point.system}, {point.texts} text(s)/call, c={point.concurrency}, workers {point.workers}, "
            f"batching {'on' if point.batching else 'off'}")  # fmt: skip


def key_ratios(results: Results, saturation: int) -> list[str]:
    r = results
    c = saturation
    ceiling_best = max((row.included for row in r.ceiling), default=None)
    ceiling_bare = max((row.excluded for row in r.ceiling), default=None)
    native_best = best(r.select(system=NATIVE))
    base = {"system": NATIVE, "texts": 1, "concurrency": c, "workers": 1}
    on, off = r.one(**base, batching=True, attention=False), r.one(**base, batching=False, attention=False)
    attention_on = r.one(**base, batching=True, attention=True)
    naive_same = r.one(system=NAIVE, texts=1, concurrency=c, attention=False)
    v2_same = r.one(system=V2, texts=1, concurrency=c)
    ml_same = r.one(system=MLSERVER, texts=1, concurrency=c)
    w1 = best(r.select(system=NATIVE, texts=1, workers=1, batching=True, attention=False))
    w2 = best(r.select(system=NATIVE, texts=1, workers=2, batching=True, attention=False))
    rows = [
        ("attnserve native ÷ ceiling (tokenization included), best of each", ratio(_tps(native_best), ceiling_best),
         f"{num(_tps(native_best))} vs {num(ceiling_best)} texts/s; {_where(native_best)}"),
        ("attnserve native ÷ ceiling (model alone), best of each", ratio(_tps(native_best), ceiling_bare),
         f"{num(_tps(native_best))} vs {num(ceiling_bare)} texts/s"),
        (f"batching on ÷ off, c={c}, single text", ratio(_tps(on), _tps(off)),
         f"{num(_tps(on))} vs {num(_tps(off))} texts/s; p99 {num(on and on.p99_ms, 1)} vs "
         f"{num(off and off.p99_ms, 1)} ms"),
        (f"attention off ÷ on, c={c}, single text", ratio(_tps(on), _tps(attention_on)),
         f"{num(_tps(on))} vs {num(_tps(attention_on))} texts/s"),
        ("--workers 2 ÷ --workers 1, best single-text", ratio(_tps(w2), _tps(w1)),
         f"{num(_tps(w2))} vs {num(_tps(w1))} texts/s"),
        (f"attnserve ÷ naive server, c={c}, single text", ratio(_tps(on), _tps(naive_same)),
         f"{num(_tps(on))} vs {num(_tps(naive_same))} texts/s"),
        ("attnserve ÷ naive server, best of each", ratio(_tps(native_best), _tps(best(r.select(system=NAIVE)))),
         _where(best(r.select(system=NAIVE)))),
        (f"attnserve V2 ÷ MLServer, c={c}, single text", ratio(_tps(v2_same), _tps(ml_same)),
         f"{num(_tps(v2_same))} vs {num(_tps(ml_same))} texts/s"),
        ("attnserve V2 ÷ MLServer, best of each",
         ratio(_tps(best(r.select(system=V2))), _tps(best(r.select(system=MLSERVER)))),
         _where(best(r.select(system=MLSERVER)))),
        (f"attnserve V2 ÷ native, c={c}, single text", ratio(_tps(v2_same), _tps(on)), ""),
    ]  # fmt: skip
    lines = ["| ratio | value | figures |", "|---|---:|---|"]
    lines += [f"| {name} | **{value}** | {detail} |" for name, value, detail in rows]
    return lines


def points_table(points: list[Point], with_batch: bool = True) -> list[str]:
    head = "| system | workers | batching | attention | texts/call | c | texts/s | calls/s | p50 ms | p95 ms | p99 ms | errors |"
    lines = [head + (" mean batch |" if with_batch else ""), "|" + "---|" * (12 + with_batch)]
    for p in points:
        row = (f"| {p.system} | {p.workers} | {'on' if p.batching else 'off'} | {'on' if p.attention else 'off'} "
               f"| {p.texts} | {p.concurrency} | {num(p.texts_per_s)} | {num(p.rps)} | {num(p.p50_ms, 2)} "
               f"| {num(p.p95_ms, 2)} | {num(p.p99_ms, 2)} | {p.error_share:.1%} |")  # fmt: skip
        lines.append(row + (f" {num(p.mean_batch, 1)} |" if with_batch else ""))
    return lines


def render(results: Results, saturation: int, images: str = "") -> str:
    r = results
    model = r.model
    out = [
        f"# attnserve benchmark ({r.mode} mode, {r.started})",
        "",
        f"**Machine**: {one_line(r.machine)}.",
        "",
        f"**Model**: `{model['name']}` v{model['version']} ({model['family']}, attention {model['attention']}, "
        f"max_len {model['max_len']}). **Load**: the load test's length mix (short/medium/long/over-length); "
        "the load generator (asyncio gRPC, prepared requests) runs on the same cores as the server.",
        "",
        "## Key ratios",
        "",
        *key_ratios(r, saturation),
    ]
    if r.ceiling:
        out += ["", "## 1. Ceiling: onnxruntime in-process", "",
                "| intra-op threads | batch | texts/s, model alone | texts/s, with tokenization | texts/s, with attention output |",
                "|---:|---:|---:|---:|---:|"]  # fmt: skip
        out += [f"| {c.threads} | {c.batch} | {num(c.excluded)} | {num(c.included)} | {num(c.attention)} |"
                for c in r.ceiling]  # fmt: skip
    sections = [
        ("2. attnserve native API", [NATIVE]),
        ("3. attnserve V2 API (perf_analyzer; own generator)", [PERF, V2]),
        ("4. Naive baseline server", [NAIVE]),
        ("5. MLServer (V2 ModelInfer, adaptive batching)", [MLSERVER]),
    ]
    for title, systems in sections:
        chosen = [p for p in r.points if p.system in systems]
        if chosen:
            out += ["", f"## {title}", "", *points_table(chosen)]
    if r.memory is not None:
        m = r.memory
        out += ["", "## 6. Memory (RSS of the server process tree)", "",
                "| idle | after requests | requests | capacity calls/s | soak rate calls/s | soak | soak start | soak end | growth (2nd half) | soak errors |",
                "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
                f"| {num(m.idle_mb, 1)} MB | {num(m.after_requests_mb, 1)} MB | {m.requests:,} | {num(m.capacity)} "
                f"| {num(m.soak_rate)} | {num(m.soak_seconds)} s | {num(m.soak_start_mb, 1)} MB | {num(m.soak_end_mb, 1)} MB "
                f"| {num(m.slope_mb_per_min, 2)} MB/min | {m.soak_error_share:.2%} |"]  # fmt: skip
    if r.seqlen is not None:
        s = r.seqlen
        out += ["", "## 7. Text length", "", "| tokens | onnxruntime texts/s (batch 32) | attnserve texts/s | p50 ms | p99 ms |",
                "|---:|---:|---:|---:|---:|"]  # fmt: skip
        for length, raw in s.raw_texts_per_s.items():
            p = s.service.get(length)
            out.append(f"| {length} | {num(raw)} | {num(_tps(p))} | {num(p and p.p50_ms, 2)} | {num(p and p.p99_ms, 2)} |")
        if s.padding:
            bucketed = s.padding.get("length buckets")
            out += ["", "| batches of 32 mixed-length texts | texts/s | vs length buckets |", "|---|---:|---:|"]
            out += [f"| {name} | {num(v)} | {ratio(v, bucketed)} |" for name, v in s.padding.items()]
    if r.profile is not None:
        summary = r.profile["summary"]
        out += ["", f"## Profile ({r.profile['title']})", "", "| function (self) | share of samples |", "|---|---:|"]
        out += [f"| `{name}` | {share:.1%} |" for name, share in summary["self"][:8]]
    if r.skipped:
        out += ["", "## Not measured in this run", ""] + [f"- **{k}**: {v}" for k, v in r.skipped.items()]
    plots = [f"![{title}]({images}{name})" for name, title in PLOTS.items()]
    out += ["", "## Plots", "", *plots, "", "Wall time per section: "
            + ", ".join(f"{k} {v:.0f} s" for k, v in r.seconds.items())]  # fmt: skip
    return "\n".join(out) + "\n"
