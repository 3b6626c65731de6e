"""The peer comparison as markdown (tables and the goal ratios) and a PNG, from its peers.json
(`python -m bench peers --from RUN/peers.json [--before EARLIER/peers.json]`), and into the docs."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from bench.render import PREFIX, figure, markdown_table, save, write_between
from kit.results import Point

Results = dict[str, Any]  # peers.json, its "points" read back as `Point`s (see `load`)
W1, W2, FLOOR, TRITON, MLSERVER = "attnserve w1", "attnserve w2", "floor", "PyTriton", "MLServer"
PEERS_BEGIN, PEERS_END = "<!-- peers:begin -->", "<!-- peers:end -->"
PEERS_PAGE = Path("results") / "peers.md"


def find(results: Results, system: str, *, c: int, **where: str) -> Point | None:
    """`system`'s point at concurrency `c`; unless `where` says otherwise V2, perf_analyzer, text16, unary."""
    want = {"api": "v2", "generator": "perf_analyzer", "workload": "text16", "mode": "unary"} | where
    matches = (p for p in results["points"] if (p.system, p.concurrency) == (system, c))
    found: Point | None = next((p for p in matches if all(getattr(p, k) == v for k, v in want.items())), None)
    return found


def ratio(a: Point | None, b: Point | None, key: str = "rps") -> float:
    if a is None or b is None or not getattr(b, key) or getattr(a, key) is None:
        return math.nan
    return float(getattr(a, key)) / float(getattr(b, key))


def goals(results: Results) -> list[tuple[str, str, bool | None]]:
    """(goal, figure, met) for every ratio the performance goals name; met None: not measured."""
    rows: list[tuple[str, str, bool | None]] = []

    def add(goal: str, value: float, test: Callable[[float], bool], unit: str = "x") -> None:
        met = None if math.isnan(value) else test(value)
        rows.append((goal, "n/a" if met is None else f"{value:.2f}{unit}", met))

    f = partial(find, results)
    for c in (8, 32):
        add(f"V2 TEXT w1 / floor, c={c} (>= 0.6)", ratio(f(W1, c=c), f(FLOOR, c=c)), lambda v: v >= 0.6)
    one, floor_one = f(W1, c=1), f(FLOOR, c=1)
    gap = one.p50_ms - floor_one.p50_ms if one and floor_one else math.nan
    add("V2 TEXT w1 p50 - floor p50, c=1 (<= 0.25 ms)", gap, lambda v: v <= 0.25, " ms")
    add("V2 TEXT w1 / PyTriton, c=32 (>= 2)", ratio(f(W1, c=32), f(TRITON, c=32)), lambda v: v >= 2)
    for c in results["levels"]:
        own = ratio(f(W1, generator="own", c=c), f(MLSERVER, generator="own", c=c))
        add(f"V2 TEXT w1 / MLServer, own generator, c={c} (>= 5)", own, lambda v: v >= 5)
    for c in results["levels"]:
        native = ratio(f(W1, api="native", generator="own", c=c), f(W1, generator="own", c=c))
        add(f"native / V2, w1, own generator, c={c} (>= 1)", native, lambda v: v >= 1)
    for c in results["levels"]:
        streaming = ratio(f(W1, mode="streaming", c=c), f(W1, c=c))
        add(f"V2 TEXT w1 streaming / unary, c={c} (>= 1)", streaming, lambda v: v >= 1)
    add("V2 TEXT w2 / w1, c=64 (>= 1.6)", ratio(f(W2, c=64), f(W1, c=64)), lambda v: v >= 1.6)
    for c in results["levels"]:
        ours, floor = f(W1, c=c), f(FLOOR, c=c)  # the floor runs no model: all its CPU counts
        without = ours.cpu_ms_per_call_no_model if ours else None
        cpu = without / floor.cpu_ms_per_call if without is not None and floor else math.nan
        add(f"CPU per call w/o model, V2 TEXT w1 / floor, c={c} (<= 1.5)", cpu, lambda v: v <= 1.5)
    multi = [p for p in results["points"] if p.workload == "text16x32" and p.system == W1]
    if multi and results.get("raw_32_texts_per_s"):
        best = max(p.rps * p.texts for p in multi) / results["raw_32_texts_per_s"]
        add("32 texts per call / raw onnxruntime + tokenization (>= 0.85)", best, lambda v: v >= 0.85)
    return rows


def _cell(p: Point) -> str:
    return f"{p.rps:,.0f} ({p.p50_ms:.2f} / {p.p99_ms:.2f})"


def _cpu(p: Point) -> str:
    without = p.cpu_ms_per_call_no_model
    return f"{p.cpu_ms_per_call:.3f}" + ("" if without is None else f" ({without:.3f})")


def tables(results: Results) -> str:
    points = results["points"]
    systems = list(dict.fromkeys(p.system for p in points))
    load = results.get("load_average")
    lines = [
        f"Run: {results['when']}{' — ' + results['label'] if results['label'] else ''}"
        + (f", load average {', '.join(map(str, load))}" if load else "")
        + f". Command: `{results['command']}`.",
        "",
    ]
    keys = list(dict.fromkeys((p.api, p.generator, p.workload, p.mode) for p in points))
    for title, cell in (
        ("calls/s (p50 / p99 ms)", _cell),
        ("server CPU ms per call (without the model)", _cpu),
    ):
        rows = []
        for api, generator, workload, mode in keys:
            for c in sorted({*results["levels"], *([1, 4] if workload == "text16x32" else [])}):
                row = [find(results, s, api=api, generator=generator, workload=workload, mode=mode, c=c)
                       for s in systems]  # fmt: skip
                if any(row):
                    rows.append(
                        [api, generator, workload, mode, str(c), *(cell(p) if p else "–" for p in row)]
                    )
        header = ["api", "generator", "workload", "mode", "c", *systems]
        lines += [f"**{title}**", "", *markdown_table(header, rows, "llllr" + "r" * len(systems)), ""]
    if raw := results.get("raw_32_texts_per_s"):
        lines += [f"Raw onnxruntime in-process, 32 texts per run, tokenization included: {raw:,.0f} texts/s."]
        lines += [""]
    lines += [f"Not measured: {note}" for note in results["notes"]]
    return "\n".join(lines) + "\n"


def goal_table(results: Results, before: Results | None = None) -> str:
    earlier = {goal: figure for goal, figure, _ in goals(before)} if before else {}
    rows = [[goal, *([earlier.get(goal, "–")] if before else []), figure,
             "–" if met is None else ("yes" if met else "**no**")]
            for goal, figure, met in goals(results)]  # fmt: skip
    header = ["goal", "before", "after", "met"] if before else ["goal", "figure", "met"]
    return "\n".join(markdown_table(header, rows, "lrrc" if before else "lrc")) + "\n"


def plot(results: Results, path: Path) -> None:
    made, panes = figure(2, (11, 4.2))
    for pane, mode in zip(panes, ("unary", "streaming"), strict=True):
        for system in dict.fromkeys(p.system for p in results["points"]):
            series = [(c, find(results, system, mode=mode, c=c)) for c in results["levels"]]
            xs = [c for c, p in series if p]
            if xs:
                pane.plot(xs, [p.rps for _, p in series if p], marker="o", label=system)
        pane.set_xscale("log", base=2)
        pane.set(xlabel="concurrency", ylabel="calls/s (one 16-token TEXT per call)")
        pane.set_title(f"V2 ModelInfer, perf_analyzer, {mode}", fontsize=10)
        pane.grid(alpha=0.3)
        if pane.lines:  # a mode no system was measured in has nothing to name
            pane.legend(fontsize=8)
    save(made, path)


INTRO = """\
`python -m bench peers` serves the same bundle from every system at once on 127.0.0.1 and
measures them in turn at every point, so machine noise hits them alike: **floor**
(bench/serving/systems/floor_server.py: a grpc.aio server that replays attnserve's own recorded replies,
the upper bound for a Python server), **PyTriton** (Triton 2.51 from the nvidia-pytriton
wheel on CPU, onnxruntime and the bundle's tokenizer in its Python function, dynamic
batching on), **MLServer** 1.7 (adaptive batching) and attnserve with `--workers 1` and
`2`. perf_analyzer drives every V2 point (one text per request; TEXT of exactly 16 and 64
tokens, INPUT_IDS of 16; unary `--async` and `--streaming`; three 1-second windows). The
project's generator drives what perf_analyzer cannot: attnserve.v1 `Classify`, and
MLServer (its metadata declares no tensors), beside attnserve V2 under the same generator.
CPU per call is the server's whole process tree from /proc over the run; the figure in
brackets takes out the model's share (the session's CPU per text at the server's mean
batch size, measured in the benchmark process). The machine is shared by several jobs
on 2 cores: absolute figures swing from window to window; read ratios within one run and
CPU per call.

"""


def load(path: Path) -> Results:
    """A run's peers.json with its points as `Point`s."""
    results: Results = json.loads(path.read_text())
    results["points"] = [Point.from_dict(point) for point in results["points"]]
    return results


def dump(results: Results, path: Path) -> None:
    path.write_text(json.dumps({**results, "points": [p.as_dict() for p in results["points"]]}, indent=1))


def render(results: Results, out: Path, before: Results | None = None) -> str:
    text = INTRO + "### Goals\n\n" + goal_table(results, before) + "\n### Measurements\n\n" + tables(results)
    if before is not None:
        text += "\n### Before (same command)\n\n" + tables(before)
    (out / "peers.md").write_text(text)
    plot(results, out / "peers.png")
    return text


def publish(report: str, run_dir: Path, docs: Path) -> Path:
    """Replace the generated part of `docs/results/peers.md` with a run's `report` and plot."""
    image, title = f"{PREFIX}peers.png", "attnserve beside its peers: latest published run"
    body = f"![peers](../img/{image})\n\n{report}"
    images = {run_dir / "peers.png": image}
    return write_between(docs / PEERS_PAGE, PEERS_BEGIN, PEERS_END, body, title, images)
