"""attnserve beside the servers a user would pick instead, in one run, under one load generator.

Systems, workloads and figures: docs/benchmarks.md."""

# A point is a system, a workload, a mode and a concurrency. CPU per call is the server's process
# tree over the generator's whole run, over every call in it; for attnserve also without the
# model's share at its mean batch (ceiling.model_cpu_per_text).

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from attnserve.service.bundle import read_bundle
from bench import sections
from bench.serving import ceiling, tools
from bench.serving.peer_report import dump, load, publish, render
from bench.serving.sweep import load_point, perf_point
from bench.serving.systems.floor_server import floor_server
from bench.serving.texts import exact_length_texts
from bench.serving.tools import mlserver, pytriton_server
from kit.launch import ROOT, Launched, attnserve
from kit.results import Point

SYSTEMS = ("floor", "pytriton", "mlserver", "v2-w1", "v2-w2", "native-w1", "native-w2")
WORKLOADS = ("text16", "text64", "ids16")
SENTENCES = 32  # distinct requests per workload
PERF_TRIALS = 3
FIELDS = ("api", "generator", "workload", "mode", "concurrency")  # of the progress lines


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = sections.parser("peers", __doc__, served=True)
    parser.add_argument("--levels", default="1,8,32,64", help="comma-separated concurrencies")
    parser.add_argument("--seconds", type=float, default=1.0, help="perf_analyzer window (3 windows a point)")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="subset of: " + ", ".join(SYSTEMS))
    workloads = "subset of: " + ", ".join(WORKLOADS) + " (empty: only the 32-text calls)"
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help=workloads)
    parser.add_argument("--modes", default="unary,streaming")
    parser.add_argument("--out", type=Path, help="results folder (default bench/results/peers-<time>)")
    parser.add_argument("--label", default="", help="a name for this run in the report (e.g. before/after)")
    parser.add_argument("--publish", type=Path, metavar="DOCS", help="write DOCS/results/peers.md")
    earlier = "measure nothing: render (and --publish) the peers.json of an earlier run"
    parser.add_argument("--from", dest="source", type=Path, metavar="PEERS_JSON", help=earlier)
    parser.add_argument("--before", type=Path, metavar="PEERS_JSON", help="an earlier run of it")
    args = parser.parse_args(argv)
    for flag, allowed in (("systems", SYSTEMS), ("workloads", WORKLOADS), ("modes", ("unary", "streaming"))):
        sections.subset(parser, getattr(args, flag), flag, allowed)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    before = load(args.before) if args.before else None
    if args.source is not None:  # an earlier run, rendered again beside its peers.json
        results, out = load(args.source), args.source.parent
    else:
        bundle_dir = ceiling.bundle_dir(args.repository, args.model)
        wanted = set(args.systems.split(","))
        perf = bool(args.workloads) and bool(wanted & {"floor", "pytriton", "v2-w1", "v2-w2"})
        needed = {"perf_analyzer": perf, "PyTriton": "pytriton" in wanted, "MLServer": "mlserver" in wanted}
        if lacking := tools.missing(needed):
            raise tools.refuse(lacking, "leave the systems that need them out of --systems")
        out = args.out or ROOT / "bench" / "results" / f"peers-{time.strftime('%Y%m%d-%H%M%S')}"
        out.mkdir(parents=True, exist_ok=True)
        results = measure(args, bundle_dir, out, argv)
        dump(results, out / "peers.json")
    text = render(results, out, before)
    if args.publish is not None:
        publish(text, out, args.publish)
    if args.source is None:
        print(f"wrote {out / 'peers.md'} and {out / 'peers.png'}", file=sys.stderr)
    elif args.publish is None:
        print(text)
    return 0


@dataclass(frozen=True)
class System:
    name: str
    launched: Launched
    ids_model: str  # the model name that takes INPUT_IDS
    tag: str | None = None  # "w1"/"w2" for attnserve, as --systems names it (v2-w1, native-w2)


def cpu_figures(
    cpu: float, calls: int, mean: float | None, *, bundle: Path, texts: Sequence[str], texts_per_call: int = 1
) -> dict[str, Any]:
    """CPU ms per call, and without the model's share when the server reported its mean batch."""
    if calls <= 0:
        return {"cpu_ms_per_call": math.nan}
    figures: dict[str, Any] = {"cpu_ms_per_call": cpu / calls * 1000}
    if mean is not None:
        model = ceiling.model_cpu_per_text(bundle, tuple(texts), max(1, round(mean))) * texts_per_call
        figures["cpu_ms_per_call_no_model"] = (cpu / calls - model) * 1000
    return figures


def write_inputs(bundle_dir: Path, folder: Path) -> dict[str, tuple[Path, list[str]]]:
    """perf_analyzer input files, each with the texts it holds: TEXT of exactly 16 and 64 tokens,
    and the 16-token texts' ids."""
    bundle = read_bundle(bundle_dir)
    longest = min(64, bundle.manifest.max_len)
    texts = {n: exact_length_texts(bundle.tokenizer_path, n, SENTENCES, seed=n) for n in (16, longest)}
    ids = [row.ids for row in Tokenizer.from_file(str(bundle.tokenizer_path)).encode_batch(texts[16])]
    tensors = [{"INPUT_IDS": {"content": row, "shape": [len(row)]},
                "ATTENTION_MASK": {"content": [1] * len(row), "shape": [len(row)]}}
               for row in ids]  # fmt: skip
    entries = {
        "text16": (texts[16], [{"TEXT": [text]} for text in texts[16]]),
        "text64": (texts[longest], [{"TEXT": [text]} for text in texts[longest]]),
        "ids16": (texts[16], tensors),
    }
    for name, (_, data) in entries.items():
        (folder / f"{name}.json").write_text(json.dumps({"data": data}))
    (folder / "texts16.txt").write_text("\n".join(texts[16]))
    return {name: (folder / f"{name}.json", held) for name, (held, _) in entries.items()}


def measure(args: argparse.Namespace, bundle_dir: Path, out: Path, argv: list[str] | None) -> dict[str, Any]:
    """Every wanted system at every point; the run as peers.json holds it."""
    wanted, levels, model = set(args.systems.split(",")), sections.ints(args.levels), args.model
    load_average = [round(x, 2) for x in os.getloadavg()]
    inputs = write_inputs(bundle_dir, out)
    texts16 = inputs["text16"][1]
    points: list[Point] = []
    notes: list[str] = []
    # Size the queue to the largest offered load: the sweep measures speed, not shedding.
    flags = ["--max-queue", str(max(1024, 64 * max(levels)))]
    with contextlib.ExitStack() as stack:

        def start(name: str, server: Callable[[], AbstractContextManager[Launched]]) -> Launched | None:
            try:
                return stack.enter_context(server())
            except (tools.Unavailable, RuntimeError) as exc:
                notes.append(f"{name} not measured: {exc}")
                return None

        def own(system: System, api: str, per_call: int, c: int) -> None:
            """A point of the own generator, on the same 16-token sentences."""
            cpu = partial(cpu_figures, bundle=bundle_dir, texts=texts16, texts_per_call=per_call)
            setup = {"system": system.name, "workers": 2 if system.tag == "w2" else 1,
                     "workload": "text16" if per_call == 1 else f"text16x{per_call}"}  # fmt: skip
            seconds, warmup = args.seconds * PERF_TRIALS, min(0.5, args.seconds)
            points.append(load_point(system.launched, api, model, texts16, per_call, c, seconds, warmup,
                                     FIELDS, cpu, **setup))  # fmt: skip

        w1 = stack.enter_context(attnserve(args.repository, flags, workers=1))  # the floor records it
        systems = [System("attnserve w1", w1, model, "w1")]
        if {"v2-w2", "native-w2"} & wanted:
            w2 = stack.enter_context(attnserve(args.repository, flags, workers=2))
            systems.append(System("attnserve w2", w2, model, "w2"))
        if "floor" in wanted:
            files = [path for path, _ in inputs.values()]
            floor = stack.enter_context(floor_server(w1.target, model, files, out / "floor.log"))
            systems.append(System("floor", floor, model))
        triton = partial(pytriton_server, bundle_dir, model, out / "pytriton.log")
        if "pytriton" in wanted and (server := start("PyTriton", triton)):
            systems.append(System("PyTriton", server, f"{model}_ids"))
        ml = None
        if "mlserver" in wanted:
            ml = start("MLServer", lambda: mlserver(tools.mlserver_env(create=False), bundle_dir, model))
        v2 = [s for s in systems if s.tag is None or f"v2-{s.tag}" in wanted]
        workloads = [w for w in args.workloads.split(",") if w]
        for workload, mode, c, system in itertools.product(workloads, args.modes.split(","), levels, v2):
            served = system.ids_model if workload.startswith("ids") else model
            data, texts = inputs[workload]
            flow = ["--input-data", str(data), "--streaming" if mode == "streaming" else "--async"]
            point = perf_point(system.launched, served, c, flow, args.seconds, PERF_TRIALS, FIELDS,
                               partial(cpu_figures, bundle=bundle_dir, texts=texts), system=system.name,
                               api="v2", generator="perf_analyzer", workload=workload, mode=mode)  # fmt: skip
            points += [] if math.isnan(point.rps) else [point]
        for c in levels if args.workloads else []:
            for system, api in itertools.product(systems, ("native", "v2")):
                if f"{api}-{system.tag}" in wanted:  # the attnserve systems wanted for own points
                    own(system, api, 1, c)
            if ml is not None:
                own(System("MLServer", ml, model), "v2", 1, c)
        # 32 texts per call against raw onnxruntime in this process (tokenization included),
        # measured right before and after them while the servers are idle.
        raw: list[float] = []
        bundle = read_bundle(bundle_dir)
        for at in (1, 4, None) if "native-w1" in wanted else ():
            raw.append(ceiling.measure(bundle, texts16 * 4, [32], [1], max(1.0, args.seconds))[0].included)
            if at is not None:
                own(systems[0], "native", 32, at)
    return {
        "label": args.label, "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_average": load_average, "levels": levels, "points": points, "notes": notes,
        "raw_32_texts_per_s": sum(raw) / len(raw) if raw else None,
        "command": " ".join(["python -m bench peers", *(argv or sys.argv[1:])]),
    }  # fmt: skip
