"""A pretrained encoder served: attnserve's cost per text beside a raw onnxruntime session.

    .venv/bin/python -m bench encoder --repository models --model minilm --texts dev.csv \
        --serve-also sst2-cascade --concurrency 1
    .venv/bin/python -m bench encoder --tiny --repository models --model minilm   # seconds

Per model: `raw` (model.onnx in this process with the server's thread setting, tokenization
included), `expert` (the float graph cut to its logits and quantized per channel with
onnxruntime's quantize_dynamic, none of attnserve's export code) and `serve` (attnserve-serve,
Classify over gRPC without attention, with the server's peak RSS); docs/benchmarks.md.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import onnx.utils
import onnxruntime as ort
from onnxruntime.quantization import QuantType, quantize_dynamic

from attnserve.service.bundle import BundleError, read_bundle
from attnserve.service.bundle.layout import RepositoryError
from bench.sections import ints, require_at_least
from bench.sections import parser as section_parser
from bench.serving.ceiling import bundle_dir, encode, session_for, tokenizer_for
from bench.serving.memory import MB, Sampler
from bench.serving.texts import mixed_texts, prepared
from kit.launch import attnserve
from kit.ledger import percentile
from kit.load import run_closed
from kit.results import Point

TEXTS = 256


@dataclass(frozen=True)
class Raw:
    model: str
    single_p50_ms: float
    batch_texts_per_s: float


@dataclass(frozen=True)
class Memory:
    model: str
    peak_rss_mb: float


def expert_graph(bundle_path: Path, folder: Path) -> Path:
    """The float model.onnx cut to its logits and quantized to int8, one scale per channel."""
    cut, target = folder / "logits.onnx", folder / "expert-int8.onnx"
    model_path = read_bundle(bundle_path).model_path
    onnx.utils.extract_model(str(model_path), str(cut), ["input_ids", "attention_mask"], ["logits"])
    quantize_dynamic(cut, target, weight_type=QuantType.QInt8, per_channel=True)
    return target


def measure_raw(bundle_path: Path, model: str, texts: Sequence[str], per_call: int, seconds: float,
                threads: int, graph: Path | None = None) -> Raw:  # fmt: skip
    bundle = read_bundle(bundle_path)
    tokenizer = tokenizer_for(bundle)
    if graph is None:
        session = session_for(bundle, threads)
    else:
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        # Spinning when it has more than one thread, as the server runs such a model.
        options.add_session_config_entry("session.intra_op.allow_spinning", "1" if threads > 1 else "0")
        session = ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])

    def run(group: Sequence[str]) -> None:
        ids, mask = encode(tokenizer, group)
        session.run(["logits"], {"input_ids": ids, "attention_mask": mask})

    run(texts[:per_call])  # warm-up: first-run allocations stay out of the figures
    latencies: list[float] = []
    started = time.perf_counter()
    while time.perf_counter() - started < seconds / 2 or len(latencies) < 3:
        text = texts[len(latencies) % len(texts)]
        begun = time.perf_counter()
        run([text])
        latencies.append(1e3 * (time.perf_counter() - begun))
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds / 2 or done < 3 * per_call:
        start = done % len(texts)
        run([texts[(start + j) % len(texts)] for j in range(per_call)])
        done += per_call
    r = Raw(model, percentile(latencies, 50), done / (time.perf_counter() - started))
    print(f"  raw   {r.model:<20s} single text p50 {r.single_p50_ms:.2f} ms, "
          f"{per_call} texts a run {r.batch_texts_per_s:.1f} texts/s", flush=True)  # fmt: skip
    return r


def measure_served(version_dir: Path, model: str, texts: Sequence[str], levels: Sequence[int], per_call: int,
                   seconds: float, warmup: float) -> tuple[list[Point], Memory]:  # fmt: skip
    """Serve this one model version alone (a private copy of the repository), so the RSS is its own."""
    single = prepared("native", model, texts, 1, False)
    batch = prepared("native", model, texts, per_call, False)
    points: list[Point] = []
    with contextlib.ExitStack() as stack:
        repository = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="attnserve-encoder-")))
        shutil.copytree(version_dir, repository / model / version_dir.name)
        server = stack.enter_context(attnserve(repository))
        sampler = stack.enter_context(Sampler(server.pid, 0.1))
        for requests, concurrency in [*((single, c) for c in levels), (batch, 1)]:
            m = run_closed(server.target, requests, concurrency, seconds, warmup=warmup)
            points.append(Point.of(m, system=model, concurrency=concurrency))
            print(_line(points[-1]), flush=True)
        sampler.sample()
    peak = max(sample.rss_mb for sample in sampler.samples)
    return points, Memory(model, peak)


def _texts(path: Path | None, column: str) -> list[str]:
    if path is None:
        return []
    with path.open(newline="", encoding="utf-8") as handle:
        return [row[column] for row in csv.DictReader(handle)]


def _line(p: Point) -> str:
    return (
        f"  serve {p.system:<20s} {p.texts:>2d} text(s)/call c={p.concurrency:<3d} "
        f"{p.texts_per_s:8.1f} texts/s  p50 {p.p50_ms:7.2f} ms  p99 {p.p99_ms:7.2f} ms"
        + (f"  errors {p.errors}" if p.errors else "")
    )


def main(argv: list[str] | None = None) -> int:
    parser = section_parser("encoder", __doc__)
    parser.add_argument("--repository", type=Path, required=True, help="model repository")
    parser.add_argument("--model", required=True, help="the float bundle's model name")
    parser.add_argument("--int8-model", default=None, help="the same model exported with --quantize int8")
    parser.add_argument("--concurrency", default="1,8,32", type=ints, help="single-text callers")
    parser.add_argument("--per-call", type=int, default=32, help="texts per call of the batch point")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per point")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds of warm-up per point")
    also = "another model, served only (a cascade, a baseline)"
    parser.add_argument("--serve-also", action="append", default=[], help=also)
    parser.add_argument("--texts", type=Path, default=None, help="a CSV of texts, in file order")
    parser.add_argument("--text-column", default="sentence", help="the text column of --texts")
    parser.add_argument("--no-expert", action="store_true", help="skip the expert's int8 graph")
    cores = len(os.sched_getaffinity(0))
    parser.add_argument("--threads", type=int, default=cores, help="intra-op threads of raw sessions")
    parser.add_argument("--out", type=Path, default=None, help="write every figure here as JSON")
    args = parser.parse_args(argv)
    require_at_least(parser, args, {"per_call": 1, "threads": 1})
    if not (levels := args.concurrency) or min(levels) < 1:
        parser.error("--concurrency needs positive integers, e.g. 1,8,32")
    models = [args.model] + ([args.int8_model] if args.int8_model else [])
    raw: list[Raw] = []
    served: list[Point] = []
    memory: list[Memory] = []
    seconds, warmup = args.seconds, args.warmup
    try:
        for model in [*models, *args.serve_also]:  # --serve-also: served only, no single graph to run raw
            path, alone = bundle_dir(args.repository, model), model in models
            max_len = read_bundle(path).manifest.max_len if alone else 64
            texts = _texts(args.texts, args.text_column) or mixed_texts(TEXTS, max_len)
            graphs: list[tuple[str, Path | None]] = [(model, None)] if alone else []
            with tempfile.TemporaryDirectory(prefix="attnserve-expert-") as folder:
                if model == args.model and not args.no_expert:
                    graphs.append((f"{model} expert int8", expert_graph(path, Path(folder))))
                for name, graph in graphs:
                    raw.append(measure_raw(path, name, texts, args.per_call, seconds, args.threads, graph))
            points, peak = measure_served(path, model, texts, levels, args.per_call, seconds, warmup)
            served, memory = served + points, [*memory, peak]
            if alone:
                print(f"  rss   {model:<20s} peak {peak.peak_rss_mb:.0f} MB", flush=True)
    except (BundleError, RepositoryError, FileNotFoundError) as exc:
        print(f"bench encoder: {exc}", file=sys.stderr)
        return 2
    if args.out is not None:
        document = {
            "raw": [asdict(r) for r in raw],
            "served": [s.as_dict() for s in served],
            "memory": [asdict(m) for m in memory],
            "rss_unit": f"{MB} bytes",
        }
        args.out.write_text(json.dumps(document, indent=2) + "\n")
    failed = [p for p in served if p.errors or p.texts_per_s <= 0]
    return 1 if failed else 0
