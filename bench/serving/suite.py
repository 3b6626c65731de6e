"""The serving suite: attnserve beside its limits and the alternatives, measured in one run on
the same machine, to a folder of markdown and PNGs (`python -m bench [--tiny|--quick]`).

Every server runs on 127.0.0.1 and every load is bounded in time. Exit status 1 when a section
failed (the report says why); 2 with --strict when a tool is missing, named before anything runs.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from attnserve.service.bundle import read_bundle
from bench.sections import SERVING_SECTIONS as SECTIONS
from bench.serving import (
    ceiling,
    machine,
    memory,
    profiling,
    report,
    seqlen,
    sweep,
    tools,
)
from bench.serving.plan import PLANS, Plan
from bench.serving.results import Results
from bench.serving.systems.mlserver import Unavailable, mlserver, mlserver_env
from bench.serving.systems.naive_server import naive
from bench.serving.texts import mixed_texts
from kit.launch import ROOT


class Skip(Exception):
    """A section that cannot run here; the message says why."""


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__.split("\n\n")[0],
        epilog="Other sections: python -m bench list",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", dest="mode", action="store_const", const="quick", help="a few minutes")
    mode.add_argument("--tiny", dest="mode", action="store_const", const="tiny", help="seconds (CI)")
    parser.set_defaults(mode="full")
    parser.add_argument("--repository", type=Path, default=ROOT / "models")
    parser.add_argument("--model", default="car-order")
    parser.add_argument("--out", type=Path, help="results folder (default bench/results/<time>)")
    parser.add_argument(
        "--sections", default=",".join(SECTIONS), help="comma-separated subset of: " + ", ".join(SECTIONS)
    )
    parser.add_argument(
        "--strict", action="store_true", help="a section that cannot run (missing tool) fails the run"
    )
    parser.add_argument(
        "--no-mlserver-setup",
        action="store_true",
        help="do not create .venv-mlserver when it is missing (skip the MLServer comparison)",
    )
    parser.add_argument(
        "--publish",
        type=Path,
        metavar="DOCS",
        help="write DOCS/results/serving.md, DOCS/img/ and DOCS/profile/",
    )
    parser.add_argument(
        "--from", dest="source", type=Path, metavar="RUN_DIR",
        help="measure nothing: render (and --publish) the results.json of an earlier run",
    )  # fmt: skip
    args = parser.parse_args(argv)
    unknown = set(args.sections.split(",")) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown section(s) {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    return args


def model_facts(bundle_dir: Path) -> dict[str, Any]:
    manifest = read_bundle(bundle_dir).manifest
    spec = manifest.attention
    attention = spec.kind + (f" {spec.layers}x{spec.heads}" if spec.kind in ("layers", "self") else "")
    return {"name": manifest.name, "version": manifest.version, "family": manifest.family,
            "attention": attention, "max_len": manifest.max_len, "kind": spec.kind}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    if args.source is not None:
        earlier = Results.read(args.source / "results.json")
        report.write(earlier, args.source, PLANS[earlier.mode].saturation, args.publish)
        return 0
    plan: Plan = PLANS[args.mode]
    wanted = [s for s in SECTIONS if s in args.sections.split(",")]
    try:
        bundle_dir = ceiling.bundle_dir(args.repository, args.model)
    except (FileNotFoundError, NotADirectoryError):
        print(f"bench: no model {args.model!r} in {args.repository}; train and export one first "
              "(`make model`), or pass --repository/--model", file=sys.stderr)  # fmt: skip
        return 2
    needs = {"perf_analyzer": "v2" in wanted, "MLServer": "mlserver" in wanted and args.no_mlserver_setup}
    lacking = tools.missing(tool for tool, needed in needs.items() if needed)
    if lacking and args.strict:
        leave_out = "leave their sections out of --sections (or drop --strict to skip them)"
        print(tools.message(lacking, leave_out), file=sys.stderr)
        return 2
    out = args.out or ROOT / "bench" / "results" / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    facts = model_facts(bundle_dir)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    results = Results(args.mode, when, machine.describe(), facts)
    results.command = " ".join(["python -m bench", *(sys.argv[1:] if argv is None else argv)])
    texts = mixed_texts(512, facts["max_len"])
    has_attention = facts["kind"] != "none"
    attentions = (False, True) if has_attention else (False,)
    bundle = read_bundle(bundle_dir)
    repo, model = args.repository, args.model

    def run_sweep() -> None:
        perf = "v2" in wanted and "perf_analyzer" not in lacking
        if "perf_analyzer" in lacking:
            install = tools.INSTALL["perf_analyzer"]
            results.skipped["v2 (perf_analyzer)"] = f"{lacking['perf_analyzer']} (install: {install})"
        results.points += sweep.run(
            repo, model, texts, plan, native="native" in wanted, v2="v2" in wanted, perf_analyzer=perf,
            has_attention=has_attention, work_dir=out,
        )  # fmt: skip

    def run_mlserver() -> None:
        if "MLServer" in lacking:
            raise Skip(f"{lacking['MLServer']} (or run without --no-mlserver-setup)")
        try:
            python = mlserver_env(create=not args.no_mlserver_setup)
        except Unavailable as exc:
            raise Skip(str(exc)) from None
        with mlserver(python, bundle_dir, model) as server:
            results.points += sweep.others(server, "v2", model, texts, plan, (False,), system=sweep.MLSERVER)

    def run_naive() -> None:
        with naive(bundle_dir) as server:
            results.points += sweep.others(
                server, "native", model, texts, plan, attentions, system=sweep.NAIVE, batching=False
            )

    threads = sorted({1, int(results.machine["cores"] or 1)})
    steps: dict[str, Callable[[], None]] = {
        "ceiling": lambda: results.ceiling.extend(
            ceiling.measure(bundle, texts, plan.ceiling_batches, threads, plan.ceiling_seconds)
        ),
        "native": run_sweep,
        "naive": run_naive,
        "mlserver": run_mlserver,
        "memory": lambda: setattr(results, "memory", memory.measure(repo, model, texts, plan)),
        "seqlen": lambda: setattr(results, "seqlen", seqlen.measure(repo, model, texts, plan)),
        "profile": lambda: setattr(results, "profile", profiling.profile(repo, model, texts, plan, out)),
    }
    if "v2" in wanted and "native" not in wanted:
        steps["v2"] = run_sweep
    failed = False
    for section in wanted:
        step = steps.get(section)
        if step is None:  # v2 runs inside the native sweep, on the same servers
            continue
        print(f"== {section} ({plan.name})", file=sys.stderr, flush=True)
        started = time.monotonic()
        try:
            step()
        except Skip as exc:
            results.skipped[section] = f"failed: {exc}" if args.strict else str(exc)
            failed = failed or args.strict
            print(f"   {section}: {exc}", file=sys.stderr)
        except Exception as exc:  # one broken section must not hide the others' results
            traceback.print_exc()
            results.skipped[section] = f"failed: {type(exc).__name__}: {exc}"
            failed = True
        results.seconds[section] = time.monotonic() - started
    report.write(results, out, plan.saturation, args.publish)
    return 1 if failed else 0
