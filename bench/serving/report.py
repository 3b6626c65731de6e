"""The serving suite's report: key ratios first, then every measured table, as markdown; with its
plots, into the docs (`--publish`)."""

from __future__ import annotations

import math
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path

from bench.render import PREFIX, num, ratio, write_between
from bench.render import markdown_table as table
from bench.serving import profiling
from bench.serving.plots import PLOTS
from bench.serving.results import Memory, Results, SeqLen, one_line
from bench.serving.sweep import MLSERVER, NAIVE, NATIVE, PERF, V2
from kit.results import Point

BEGIN, END = "<!-- bench:results:begin -->", "<!-- bench:results:end -->"
PAGE = Path("results") / "serving.md"
PROFILE_FILES = ("profile.md", "profile.svg", "profile.txt")
POINT_COLUMNS = ["system", "workers", "batching", "attention", "texts/call", "c", "texts/s", "calls/s",
                 "p50 ms", "p95 ms", "p99 ms", "errors", "mean batch"]  # fmt: skip


def best(points: Iterable[Point]) -> Point | None:
    candidates = [p for p in points if not math.isnan(p.texts_per_s)]
    return max(candidates, key=lambda p: p.texts_per_s) if candidates else None


def tps(point: Point | None) -> float | None:
    return None if point is None else point.texts_per_s


def where(point: Point | None) -> str:
    if point is None:
        return "not measured"
    p, on = point, "on" if point.batching else "off"
    return f"{p.system}, {p.texts} text(s)/call, c={p.concurrency}, workers {p.workers}, batching {on}"


def versus(a: Point | None, b: Point | None) -> str:
    return f"{num(tps(a))} vs {num(tps(b))} texts/s"


def key_ratios(r: Results, c: int) -> list[str]:
    ceiling_tokenized = max((row.included for row in r.ceiling), default=None)
    ceiling_bare = max((row.excluded for row in r.ceiling), default=None)
    native = best(r.select(system=NATIVE))
    base = {"system": NATIVE, "texts": 1, "concurrency": c, "workers": 1}
    on, off = r.one(**base, batching=True, attention=False), r.one(**base, batching=False, attention=False)
    attention = r.one(**base, batching=True, attention=True)
    naive_c = r.one(system=NAIVE, texts=1, concurrency=c, attention=False)
    naive_best = best(r.select(system=NAIVE))
    v2_c, v2_best = r.one(system=V2, texts=1, concurrency=c), best(r.select(system=V2))
    ml_c, ml_best = r.one(system=MLSERVER, texts=1, concurrency=c), best(r.select(system=MLSERVER))
    single = {"system": NATIVE, "texts": 1, "batching": True, "attention": False}
    w1, w2 = best(r.select(**single, workers=1)), best(r.select(**single, workers=2))
    p99 = f"; p99 {num(on.p99_ms if on else None, 1)} vs {num(off.p99_ms if off else None, 1)} ms"
    rows = [
        ["attnserve ÷ ceiling with tokenization, best of each", ratio(tps(native), ceiling_tokenized),
         f"{num(tps(native))} vs {num(ceiling_tokenized)} texts/s; {where(native)}"],
        ["attnserve ÷ ceiling, model alone, best of each", ratio(tps(native), ceiling_bare),
         f"{num(tps(native))} vs {num(ceiling_bare)} texts/s"],
        [f"batching on ÷ off, c={c}, single text", ratio(tps(on), tps(off)), versus(on, off) + p99],
        [f"attention off ÷ on, c={c}, single text", ratio(tps(on), tps(attention)), versus(on, attention)],
        ["--workers 2 ÷ 1, best single-text", ratio(tps(w2), tps(w1)), versus(w2, w1)],
        [f"attnserve ÷ naive server, c={c}, single text", ratio(tps(on), tps(naive_c)), versus(on, naive_c)],
        ["attnserve ÷ naive server, best of each", ratio(tps(native), tps(naive_best)), where(naive_best)],
        [f"attnserve V2 ÷ MLServer, c={c}, single text", ratio(tps(v2_c), tps(ml_c)), versus(v2_c, ml_c)],
        ["attnserve V2 ÷ MLServer, best of each", ratio(tps(v2_best), tps(ml_best)), where(ml_best)],
        [f"attnserve V2 ÷ native, c={c}, single text", ratio(tps(v2_c), tps(on)), versus(v2_c, on)],
    ]  # fmt: skip
    return table(["ratio", "value", "figures"], [[name, f"**{value}**", d] for name, value, d in rows], "lrl")


def point_row(p: Point) -> list[str]:
    on_off = ("off", "on")
    return [p.system, str(p.workers), on_off[p.batching], on_off[p.attention], str(p.texts),
            str(p.concurrency), num(p.texts_per_s), num(p.rps), num(p.p50_ms, 2), num(p.p95_ms, 2),
            num(p.p99_ms, 2), f"{p.error_share:.1%}", num(p.mean_batch, 1)]  # fmt: skip


def memory_lines(m: Memory) -> list[str]:
    header = ["idle", "after calls", "calls", "capacity calls/s", "soak calls/s", "soak", "soak start",
              "soak end", "growth, 2nd half", "soak errors"]  # fmt: skip
    row = [f"{num(m.idle_mb, 1)} MB", f"{num(m.after_requests_mb, 1)} MB", f"{m.requests:,}", num(m.capacity),
           num(m.soak_rate), f"{num(m.soak_seconds)} s", f"{num(m.soak_start_mb, 1)} MB",
           f"{num(m.soak_end_mb, 1)} MB", f"{num(m.slope_mb_per_min, 2)} MB/min",
           f"{m.soak_error_share:.2%}" + (f" {m.soak_errors}" if m.soak_errors else "")]  # fmt: skip
    return table(header, [row], align="r" * len(header))


def seqlen_lines(s: SeqLen) -> list[str]:
    rows = []
    for length, raw in s.raw_texts_per_s.items():
        p = s.service.get(length)
        p50, p99 = (p.p50_ms, p.p99_ms) if p else (None, None)
        rows.append([str(length), num(raw), num(tps(p)), num(p50, 2), num(p99, 2)])
    header = ["tokens", "onnxruntime texts/s, batch 32", "attnserve texts/s", "p50 ms", "p99 ms"]
    lines = table(header, rows, align="rrrrr")
    if s.padding:
        bucketed = s.padding.get("length buckets")
        padding = [[name, num(v), ratio(v, bucketed)] for name, v in s.padding.items()]
        lines += ["", *table(["batches of 32 mixed-length texts", "texts/s", "vs length buckets"], padding)]
    return lines


def render(results: Results, saturation: int, images: str = "") -> str:
    r = results
    model = r.model
    out = [
        f"# attnserve benchmark ({r.mode} mode, {r.started})",
        "",
        f"**Machine**: {one_line(r.machine)}.",
        "",
        *([f"**Command**: `{r.command}`.", ""] if r.command else []),
        f"**Model**: `{model['name']}` v{model['version']} ({model['family']}, "
        f"attention {model['attention']}, max_len {model['max_len']}). **Load**: the load test's length mix "
        "(short, medium, long and over-length texts); the load generator (asyncio gRPC, prepared "
        "requests) shares the cores with the server.",
        "",
        "## Key ratios",
        "",
        *key_ratios(r, saturation),
    ]
    if r.ceiling:
        header = ["intra-op threads", "batch", "texts/s, model alone", "texts/s, with tokenization",
                  "texts/s, with attention output"]  # fmt: skip
        rows = [[str(c.threads), str(c.batch), num(c.excluded), num(c.included), num(c.attention)]
                for c in r.ceiling]  # fmt: skip
        out += ["", "## 1. Ceiling: onnxruntime in-process", "", *table(header, rows, align="rrrrr")]
    for title, systems in (
        ("2. attnserve native API", [NATIVE]),
        ("3. attnserve V2 API (perf_analyzer, and the own generator)", [PERF, V2]),
        ("4. Naive baseline server", [NAIVE]),
        ("5. MLServer (V2 ModelInfer, adaptive batching)", [MLSERVER]),
    ):
        chosen = [point_row(p) for p in r.points if p.system in systems]
        if chosen:
            out += ["", f"## {title}", "", *table(POINT_COLUMNS, chosen)]
    if r.memory is not None:
        out += ["", "## 6. Memory (RSS of the server's process tree)", "", *memory_lines(r.memory)]
    if r.seqlen is not None:
        out += ["", "## 7. Text length", "", *seqlen_lines(r.seqlen)]
    if (p := r.profile) is not None:
        calls = int(p.get("calls", 0))
        summary = profiling.tables(p["summary"], p.get("thread_cpu_s", {}), calls, full=False)
        out += ["", f"## Profile: {p['title']}", "", *summary]
    if r.skipped:
        out += ["", "## Not measured in this run", "", *(f"- **{k}**: {v}" for k, v in r.skipped.items())]
    out += ["", "## Plots", "", *(f"![{title}]({images}{name})" for name, (title, _) in PLOTS.items())]
    out += ["", "Wall time per section: " + ", ".join(f"{k} {v:.0f} s" for k, v in r.seconds.items()) + "."]
    return "\n".join(out) + "\n"


def write(results: Results, out: Path, saturation: int, docs: Path | None) -> None:
    """results.json, report.md and the plots into `out`; with `docs`, the report into
    docs/results/serving.md, the plots into docs/img/, a profile into docs/profile/."""
    results.write(out / "results.json")
    for name, (_, draw) in PLOTS.items():
        draw(results, out / name)
    (out / "report.md").write_text(render(results, saturation))
    if docs is not None:
        for name in PROFILE_FILES:
            if (out / name).is_file():
                (docs / "profile").mkdir(exist_ok=True)
                shutil.copyfile(out / name, docs / "profile" / f"server-under-load{Path(name).suffix}")
        body = render(results, saturation, images=f"../img/{PREFIX}")
        demoted = "\n".join("#" + line if line.startswith("#") else line for line in body.splitlines())
        images = {out / name: f"{PREFIX}{name}" for name in PLOTS}
        write_between(docs / PAGE, BEGIN, END, demoted, "Serving suite: latest published run", images)
    print(f"wrote {out / 'report.md'}, results.json and {len(PLOTS)} PNGs", file=sys.stderr)
