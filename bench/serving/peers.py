"""attnserve beside the servers a user would pick instead, in one run, under one load generator.

    python -m bench peers --repository models --model car-order            # about 10 minutes
    python -m bench peers --levels 8 --seconds 0.5 --systems floor,v2-w1    # seconds
    python -m bench peers --from RUN/peers.json --before EARLIER/peers.json --publish docs

Every system serves the same bundle at once and is measured in turn at every point, so
machine noise hits them alike; systems, workloads and figures: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from attnserve.service.bundle import read_bundle
from bench.sections import ints, subset
from bench.sections import parser as section_parser
from bench.serving import ceiling, tools
from bench.serving.peer_points import System, loadgen_point, perf_point
from bench.serving.peer_report import dump, load, publish, render
from bench.serving.systems.floor_server import floor_server
from bench.serving.systems.mlserver import Unavailable, mlserver, mlserver_env
from bench.serving.systems.pytriton_env import pytriton_python, pytriton_server
from bench.serving.texts import exact_length_texts
from kit.launch import ROOT, attnserve
from kit.results import Point

SYSTEMS = ("floor", "pytriton", "mlserver", "v2-w1", "v2-w2", "native-w1", "native-w2")
WORKLOADS = ("text16", "text64", "ids16")
SENTENCES = 32  # distinct requests per workload


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = section_parser("peers", __doc__, served=True)
    parser.add_argument("--levels", default="1,8,32,64", help="comma-separated concurrencies")
    parser.add_argument("--seconds", type=float, default=1.0, help="perf_analyzer window (3 windows a point)")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="subset of: " + ", ".join(SYSTEMS))
    workloads = "subset of: " + ", ".join(WORKLOADS) + " (empty: only the 32-text calls)"
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help=workloads)
    parser.add_argument("--modes", default="unary,streaming")
    parser.add_argument("--out", type=Path, help="results folder (default bench/results/peers-<time>)")
    parser.add_argument("--label", default="", help="a name for this run in the report (e.g. before/after)")
    parser.add_argument("--publish", type=Path, metavar="DOCS", help="write DOCS/results/peers.md")
    parser.add_argument(
        "--from", dest="source", type=Path, metavar="PEERS_JSON",
        help="measure nothing: render (and --publish) the peers.json of an earlier run",
    )  # fmt: skip
    parser.add_argument("--before", type=Path, metavar="PEERS_JSON", help="an earlier run of it")
    args = parser.parse_args(argv)
    for flag, allowed in (("systems", SYSTEMS), ("workloads", WORKLOADS), ("modes", ("unary", "streaming"))):
        subset(parser, getattr(args, flag), flag, allowed)
    return args


def write_inputs(bundle_dir: Path, folder: Path) -> dict[str, Path]:
    """perf_analyzer input files: TEXT of exactly 16 and 64 tokens, and the 16-token ids."""
    bundle = read_bundle(bundle_dir)
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(bundle.tokenizer_path))
    longest = min(64, bundle.manifest.max_len)
    texts = {n: exact_length_texts(bundle.tokenizer_path, n, SENTENCES, seed=n) for n in (16, longest)}
    files = {}
    for name, entries in (
        ("text16", [{"TEXT": [t]} for t in texts[16]]),
        ("text64", [{"TEXT": [t]} for t in texts[longest]]),
        (
            "ids16",
            [
                {
                    "INPUT_IDS": {"content": ids, "shape": [len(ids)]},
                    "ATTENTION_MASK": {"content": [1] * len(ids), "shape": [len(ids)]},
                }
                for ids in (tokenizer.encode(t).ids for t in texts[16])
            ],
        ),
    ):
        files[name] = folder / f"{name}.json"
        files[name].write_text(json.dumps({"data": entries}))
    (folder / "texts16.txt").write_text("\n".join(texts[16]))
    return files


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    before = load(args.before) if args.before else None
    if args.source is not None:
        earlier = load(args.source)
        if args.publish is not None:
            publish(earlier, args.source.parent, args.publish, before)
        else:
            print(render(earlier, args.source.parent, before))
        return 0
    try:
        bundle_dir = ceiling.bundle_dir(args.repository, args.model)
    except (FileNotFoundError, NotADirectoryError):
        print(f"bench peers: no model {args.model!r} in {args.repository}", file=sys.stderr)
        return 2
    lacking = tools.missing(needed_tools(args))
    if lacking:
        print(tools.message(lacking, "leave the systems that need them out of --systems"), file=sys.stderr)
        return 2
    out = args.out or ROOT / "bench" / "results" / f"peers-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    results = measure(args, bundle_dir, out, argv)
    dump(results, out / "peers.json")
    render(results, out, before)
    if args.publish is not None:
        publish(results, out, args.publish, before)
    print(f"wrote {out / 'peers.md'} and {out / 'peers.png'}", file=sys.stderr)
    return 0


def needed_tools(args: argparse.Namespace) -> list[str]:
    """The tools outside this environment that the wanted systems and workloads need."""
    wanted = set(args.systems.split(","))
    perf = bool(args.workloads) and bool(wanted & {"floor", "pytriton", "v2-w1", "v2-w2"})
    return [tool for tool, needed in (("perf_analyzer", perf), ("PyTriton", "pytriton" in wanted),
                                      ("MLServer", "mlserver" in wanted)) if needed]  # fmt: skip


def measure(args: argparse.Namespace, bundle_dir: Path, out: Path, argv: list[str] | None) -> dict[str, Any]:
    """Every wanted system at every point; the run as peers.json holds it."""
    wanted = args.systems.split(",")
    levels = ints(args.levels)
    load = [round(x, 2) for x in os.getloadavg()]
    inputs = write_inputs(bundle_dir, out)
    texts16 = (out / "texts16.txt").read_text().splitlines()
    bundle = read_bundle(bundle_dir)
    points: list[Point] = []
    notes: list[str] = []
    # Size the queue to the largest offered load: the sweep measures speed, not shedding.
    flags = ["--max-queue", str(max(1024, 64 * max(levels)))]
    with contextlib.ExitStack() as stack:
        systems: list[System] = []
        w1 = stack.enter_context(attnserve(args.repository, flags, workers=1))
        if "v2-w1" in wanted or "native-w1" in wanted or "floor" in wanted:
            systems.append(System.attnserve("w1", w1, args.model))
        if "v2-w2" in wanted or "native-w2" in wanted:
            w2 = stack.enter_context(attnserve(args.repository, flags, workers=2))
            systems.append(System.attnserve("w2", w2, args.model))
        if "floor" in wanted:
            floor = stack.enter_context(floor_server(w1.target, args.model, inputs, out / "floor.log"))
            systems.append(System.peer("floor", floor, args.model, f"{args.model}", streaming=True))
        if "pytriton" in wanted:
            try:
                triton = pytriton_server(pytriton_python(), bundle_dir, args.model, out / "pytriton.log")
                ids_model, server = f"{args.model}_ids", stack.enter_context(triton)
                systems.append(System.peer("PyTriton", server, args.model, ids_model, streaming=True))
            except (Unavailable, RuntimeError) as exc:
                notes.append(f"PyTriton not measured: {exc}")
        mlserver_system = None
        if "mlserver" in wanted:
            try:
                launched = stack.enter_context(mlserver(mlserver_env(create=False), bundle_dir, args.model))
                mlserver_system = System.peer("MLServer", launched, args.model, None, streaming=False)
            except (Unavailable, RuntimeError) as exc:
                notes.append(f"MLServer not measured: {exc}")
        v2 = [s for s in systems if s.tag is None or f"v2-{s.tag}" in wanted]
        workloads = [w for w in args.workloads.split(",") if w]
        for workload, mode, c, system in itertools.product(workloads, args.modes.split(","), levels, v2):
            point = perf_point(system, workload, mode, c, inputs[workload], args.seconds, bundle_dir)
            points += [point] if point is not None else []
        # The own generator: native Classify, V2 and MLServer on the same 16-token sentences.
        own = [s for s in systems if s.tag is not None]
        for c in levels if args.workloads else []:
            for system in own:
                for api in ("native", "v2"):
                    if f"{api}-{system.tag}" in wanted:
                        points.append(loadgen_point(system, api, texts16, 1, c, args.seconds, bundle_dir))
            if mlserver_system is not None:
                points.append(loadgen_point(mlserver_system, "v2", texts16, 1, c, args.seconds, bundle_dir))
        # 32 texts per call against raw onnxruntime in this process (tokenization included),
        # measured right before and after them while the servers are idle.
        raw: list[float] = []
        for at in (1, 4, None) if "native-w1" in wanted else ():
            raw.append(ceiling.measure(bundle, texts16 * 4, [32], [1], max(1.0, args.seconds))[0].included)
            if at is not None:
                points.append(loadgen_point(systems[0], "native", texts16, 32, at, args.seconds, bundle_dir))
    return {
        "label": args.label,
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_average": load,
        "levels": levels,
        "points": points,
        "notes": notes,
        "raw_32_texts_per_s": sum(raw) / len(raw) if raw else None,
        "command": " ".join(["python -m bench peers", *(argv or sys.argv[1:])]),
    }
