"""The serving suite: attnserve beside its limits and the alternatives, measured in one run on
the same machine, to a folder of markdown and PNGs (`python -m bench [--tiny|--quick]`)."""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from attnserve.service.bundle import Bundle, read_bundle
from attnserve.service.common.vocabulary import AttentionKind
from bench import sections
from bench.serving import ceiling, memory, profiling, report, sweep, tools
from bench.serving.plan import PLANS, Plan, lengths
from bench.serving.results import Results, SeqLen, describe
from bench.serving.systems.naive_server import naive
from bench.serving.texts import exact_length_texts, mixed_texts
from bench.serving.tools import Unavailable, mlserver
from kit.launch import ROOT, attnserve

SEQLEN_BATCH = 32
SECTIONS = sections.SERVING_SECTIONS


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = sections.parser("", __doc__, served=True)
    parser.epilog = "Other sections: python -m bench list"
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", dest="mode", action="store_const", const="quick", help="a few minutes")
    mode.add_argument("--tiny", dest="mode", action="store_const", const="tiny", help="seconds (CI)")
    parser.set_defaults(mode="full")
    parser.add_argument("--out", type=Path, help="results folder (default bench/results/<time>)")
    parser.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated subset")
    strict = "a section that cannot run (missing tool) fails the run"
    parser.add_argument("--strict", action="store_true", help=strict)
    no_setup = "do not create .venv-mlserver when it is missing (skip the MLServer comparison)"
    parser.add_argument("--no-mlserver-setup", action="store_true", help=no_setup)
    publish = "write DOCS/results/serving.md, DOCS/img/ and DOCS/profile/"
    parser.add_argument("--publish", type=Path, metavar="DOCS", help=publish)
    source = "measure nothing: render (and --publish) the results.json of an earlier run"
    parser.add_argument("--from", dest="source", type=Path, metavar="RUN_DIR", help=source)
    args = parser.parse_args(argv)
    sections.subset(parser, args.sections, "sections", SECTIONS)
    return args


def text_lengths(repository: Path, bundle: Bundle, model: str, mixed: Sequence[str], plan: Plan) -> SeqLen:
    """Cost against text length: texts of exactly T tokens, T from 8 to max_len, in raw onnxruntime
    at batch 32 and through the service; and mixed lengths in batches of 32 bucketed or padded (in
    process: the service has no setting to turn its bucketing off)."""
    by_length = {
        length: exact_length_texts(bundle.tokenizer_path, length, 64)
        for length in lengths(bundle.manifest.max_len, plan.seqlen_points)
    }
    ceiling_s = plan.ceiling_seconds
    result = SeqLen(ceiling.length_curve(bundle, by_length, SEQLEN_BATCH, ceiling_s),
                    padding=ceiling.padding_rows(bundle, mixed, SEQLEN_BATCH, ceiling_s))  # fmt: skip
    c, seconds, warmup = plan.seqlen_concurrency, plan.seconds, plan.warmup
    with attnserve(repository) as server:
        for length, texts in by_length.items():
            result.service[length] = sweep.load_point(
                server, "native", model, texts, 1, c, seconds, warmup, system=sweep.NATIVE
            )
    return result


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    if args.source is not None:
        earlier = Results.read(args.source / "results.json")
        report.write(earlier, args.source, PLANS[earlier.mode].saturation, args.publish)
        return 0
    plan, repo, model = PLANS[args.mode], args.repository, args.model
    wanted = [s for s in SECTIONS if s in args.sections.split(",")]
    bundle_dir = ceiling.bundle_dir(repo, model)
    no_setup = "mlserver" in wanted and args.no_mlserver_setup
    lacking = tools.missing({"perf_analyzer": "v2" in wanted, "MLServer": no_setup})
    if lacking and args.strict:
        raise tools.refuse(lacking, "leave their sections out of --sections (or drop --strict to skip them)")
    out = args.out or ROOT / "bench" / "results" / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    bundle = read_bundle(bundle_dir)
    manifest, spec = bundle.manifest, bundle.manifest.attention
    layered = spec.kind in (AttentionKind.LAYERS, AttentionKind.SELF)
    attention = spec.kind + (f" {spec.layers}x{spec.heads}" if layered else "")
    facts = {"name": manifest.name, "version": manifest.version, "family": manifest.family,
             "attention": attention, "max_len": manifest.max_len, "kind": spec.kind}  # fmt: skip
    results = Results(args.mode, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), describe(), facts)
    results.command = " ".join(["python -m bench", *(sys.argv[1:] if argv is None else argv)])
    texts, has_attention = mixed_texts(512, manifest.max_len), spec.kind != AttentionKind.NONE
    attentions = (False, True) if has_attention else (False,)

    def run_sweep() -> None:
        if "perf_analyzer" in lacking:
            why = f"{lacking['perf_analyzer']} (install: {tools.INSTALL['perf_analyzer']})"
            results.skipped["v2 (perf_analyzer)"] = why
        results.points += sweep.run(
            repo, model, texts, plan, native="native" in wanted, v2="v2" in wanted, work_dir=out,
            perf_analyzer="v2" in wanted and "perf_analyzer" not in lacking, has_attention=has_attention,
        )  # fmt: skip

    def run_mlserver() -> None:
        if "MLServer" in lacking:
            raise Unavailable(f"{lacking['MLServer']} (or run without --no-mlserver-setup)")
        with mlserver(tools.mlserver_env(create=not args.no_mlserver_setup), bundle_dir, model) as server:
            results.points += sweep.others(server, "v2", model, texts, plan, (False,), system=sweep.MLSERVER)

    def run_naive() -> None:
        with naive(bundle_dir) as server:
            setup = {"system": sweep.NAIVE, "batching": False}
            results.points += sweep.others(server, "native", model, texts, plan, attentions, **setup)

    threads = sorted({1, int(results.machine["cores"] or 1)})
    steps: dict[str, Callable[[], None]] = {  # v2 runs inside the native sweep, on the same servers
        "ceiling": lambda: results.ceiling.extend(
            ceiling.measure(bundle, texts, plan.ceiling_batches, threads, plan.ceiling_seconds)
        ),
        "native" if "native" in wanted else "v2": run_sweep,
        "naive": run_naive,
        "mlserver": run_mlserver,
        "memory": lambda: setattr(results, "memory", memory.measure(repo, model, texts, plan)),
        "seqlen": lambda: setattr(results, "seqlen", text_lengths(repo, bundle, model, texts, plan)),
        "profile": lambda: setattr(results, "profile", profiling.profile(repo, model, texts, plan, out)),
    }
    failed = False
    for section in (s for s in wanted if s in steps):
        print(f"== {section} ({plan.name})", file=sys.stderr, flush=True)
        started = time.monotonic()
        try:
            steps[section]()
        except Unavailable as exc:  # a tool this section needs cannot run here
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
