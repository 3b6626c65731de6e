"""A pretrained encoder served: attnserve's cost per text beside a raw onnxruntime session.

Per model `raw` and `serve` (docs/benchmarks.md), and `expert`: the float graph cut to its logits
and quantized per channel by onnxruntime's quantize_dynamic, none of attnserve's export code."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

import onnx.utils
from onnxruntime.quantization import QuantType, quantize_dynamic

from attnserve.service.bundle import BundleError, read_bundle
from attnserve.service.bundle.layout import RepositoryError
from bench import sections
from bench.serving.ceiling import bundle_dir, encode, rate, runner, session_for, tokenizer_for
from bench.serving.memory import MB, Sampler
from bench.serving.sweep import load_point
from bench.serving.texts import csv_texts, mixed_texts
from kit.launch import attnserve
from kit.ledger import percentile
from kit.results import Point

TEXTS = 256


@dataclass(frozen=True)
class Raw:
    model: str
    single_p50_ms: float
    batch_texts_per_s: float


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
    # `graph` spins when it has more than one thread, as the server runs such a model
    session = session_for(graph or bundle.model_path, threads, spinning=graph is not None and threads > 1)
    n, prepare = len(texts), partial(encode, tokenizer_for(bundle))
    single = runner(session, ["logits"], [[text] for text in texts], prepare)
    groups = [[texts[(i * per_call + j) % n] for j in range(per_call)] for i in range(n)]
    batches = runner(session, ["logits"], groups, prepare)
    batches(0)  # warm-up: first-run allocations stay out of the figures
    latencies: list[float] = []
    started = time.perf_counter()
    while time.perf_counter() - started < seconds / 2 or len(latencies) < 3:
        begun = time.perf_counter()
        single(len(latencies))
        latencies.append(1e3 * (time.perf_counter() - begun))
    r = Raw(model, percentile(latencies, 50), rate(batches, seconds / 2, least=3))
    print(f"  raw   {r.model:<20s} single text p50 {r.single_p50_ms:.2f} ms, "
          f"{per_call} texts a run {r.batch_texts_per_s:.1f} texts/s", flush=True)  # fmt: skip
    return r


def measure_served(version_dir: Path, model: str, texts: Sequence[str], levels: Sequence[int], per_call: int,
                   seconds: float, warmup: float) -> tuple[list[Point], float]:  # fmt: skip
    """Serve this one model version alone (a private copy of the repository), so the RSS is its own:
    the points and the server's peak RSS in MB."""
    with contextlib.ExitStack() as stack:
        repository = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="attnserve-encoder-")))
        shutil.copytree(version_dir, repository / model / version_dir.name)
        server = stack.enter_context(attnserve(repository))
        sampler = stack.enter_context(Sampler(server.pid, 0.1))
        loads = [*((1, c) for c in levels), (per_call, 1)]  # (texts per call, callers)
        points = [load_point(server, "native", model, texts, n, c, seconds, warmup, ("texts", "concurrency"),
                             system=model) for n, c in loads]  # fmt: skip
        sampler.sample()
    return points, max(sample.rss_mb for sample in sampler.samples)


def main(argv: list[str] | None = None) -> int:
    parser = sections.parser("encoder", __doc__, json_out=True)
    parser.add_argument("--repository", type=Path, required=True, help="model repository")
    parser.add_argument("--model", required=True, help="the float bundle's model name")
    parser.add_argument("--int8-model", default=None, help="the same model exported with --quantize int8")
    parser.add_argument("--concurrency", default="1,8,32", type=sections.ints, help="single-text callers")
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
    args = parser.parse_args(argv)
    sections.require_at_least(parser, args, {"per_call": 1, "threads": 1})
    if not (levels := args.concurrency) or min(levels) < 1:
        parser.error("--concurrency needs positive integers, e.g. 1,8,32")
    models = [args.model] + ([args.int8_model] if args.int8_model else [])
    raw: list[Raw] = []
    served: list[Point] = []
    memory: list[dict[str, object]] = []
    per_call, seconds = args.per_call, args.seconds
    try:
        given = csv_texts(args.texts, args.text_column) if args.texts else []
        for model in [*models, *args.serve_also]:  # --serve-also: served only, no single graph to run raw
            path, alone = bundle_dir(args.repository, model), model in models
            texts = given or mixed_texts(TEXTS, read_bundle(path).manifest.max_len if alone else 64)
            graphs: list[tuple[str, Path | None]] = [(model, None)] if alone else []
            with tempfile.TemporaryDirectory(prefix="attnserve-expert-") as folder:
                if model == args.model and not args.no_expert:
                    graphs.append((f"{model} expert int8", expert_graph(path, Path(folder))))
                for name, graph in graphs:
                    raw.append(measure_raw(path, name, texts, per_call, seconds, args.threads, graph))
            points, peak = measure_served(path, model, texts, levels, per_call, seconds, args.warmup)
            served += points
            memory.append({"model": model, "peak_rss_mb": peak})
            if alone:
                print(f"  rss   {model:<20s} peak {peak:.0f} MB", flush=True)
    except (BundleError, RepositoryError, FileNotFoundError) as exc:
        raise sections.Refused(str(exc)) from None
    document = {"raw": [asdict(r) for r in raw], "served": [s.as_dict() for s in served],
                "memory": memory, "rss_unit": f"{MB} bytes"}  # fmt: skip
    sections.write_json(args.out, document)
    return 1 if any(p.errors or p.texts_per_s <= 0 for p in served) else 0
