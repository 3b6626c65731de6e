"""Compare the ONNX exporters by the onnxruntime latency of the graphs they produce.

Timings interleave the variants over rounds and keep each one's best median, so a neighbour's
burst of CPU does not decide the comparison; figures are ratios to TorchScript at opset 18.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import torch

from attnserve.export.contract import graph_contract
from attnserve.export.onnx import export_model, verify_graph
from attnserve.export.parity import PROVIDER, measure_parity, random_batch, run_onnx, run_torch, torch_threads
from attnserve.export.timing import median_ms
from attnserve.training.models import build_model
from bench import sections
from bench.render import markdown_table

SHAPES = [(1, 16), (1, 64), (32, 16), (32, 64)]
VOCAB = 128  # about the car-order vocabulary
# (exporter, opset, onnxruntime optimizers disabled); the default graph, the baseline, is the second
VARIANTS: list[tuple[Any, int, tuple[str, ...]]] = [
    ("torchscript", 17, ()), ("torchscript", 18, ()), ("torchscript", 20, ()), ("dynamo", 18, ()),
    ("dynamo", 20, ()), ("dynamo", 20, ("SkipLayerNormFusion",)),
]  # fmt: skip
BASELINE = VARIANTS[1]


def label(exporter: str, opset: int, disabled: tuple[str, ...]) -> str:
    return f"{exporter} opset {opset}" + (f" -{','.join(disabled)}" if disabled else "")


def main(argv: Sequence[str] | None = None) -> int:
    parser = sections.parser("exporters", __doc__)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads for torch and onnxruntime")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--budget", type=float, default=0.4, help="seconds per measurement")
    cpu = "cpu: the calling thread's CPU time (needs --threads 1; robust on a busy machine)"
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall", help=cpu)
    parser.add_argument(
        "--exporter", choices=("all", "torchscript", "dynamo"), default="all",
        help="only this exporter's graphs (the torch.export-based one takes seconds a graph)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.clock == "cpu" and args.threads != 1:
        parser.error("--clock cpu measures one thread only: use it with --threads 1")
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    torch.manual_seed(0)
    model = build_model("transformer", {"vocab_size": VOCAB}).eval()
    contract = graph_contract(model)
    rng = np.random.default_rng(0)
    batches = {
        shape: random_batch(rng, *shape, vocab_size=VOCAB, pad_id=0, pad_share=0.0) for shape in SHAPES
    }
    with tempfile.TemporaryDirectory() as tmp:
        runs: dict[str, Callable[[np.ndarray, np.ndarray], object]] = {
            "torch eager": lambda ids, mask: run_torch(model, ids, mask, None)
        }
        for exporter, opset, disabled in VARIANTS:
            if args.exporter not in ("all", exporter) and (exporter, opset, disabled) != BASELINE:
                continue
            path = Path(tmp) / f"{exporter}-{opset}.onnx"
            if not path.exists():
                export_model(model, path, contract, opset=opset, exporter=exporter)
                verify_graph(path, contract)
            options = ort.SessionOptions()
            options.intra_op_num_threads = options.inter_op_num_threads = args.threads
            session = ort.InferenceSession(
                str(path), options, providers=[PROVIDER], disabled_optimizers=list(disabled)
            )
            measure_parity(model, session, max_len=64, batch_sizes=(1, 3), lengths=(2, 7)).raise_on_failure(
                label(exporter, opset, disabled)
            )
            runs[label(exporter, opset, disabled)] = partial(run_onnx, session)
        best: dict[tuple[str, tuple[int, int]], float] = {}
        for _ in range(args.rounds):
            for shape, (ids, mask) in batches.items():
                for name, run in runs.items():
                    with torch_threads(args.threads):
                        ms = median_ms(partial(run, ids, mask), budget_s=args.budget, clock=clock)
                    best[(name, shape)] = min(best.get((name, shape), ms), ms)
    base = label(*BASELINE)
    rows = [[name, *(f"{best[(name, s)]:.3f} ({best[(name, s)] / best[(base, s)]:.2f}x)" for s in SHAPES)]
            for name in runs]  # fmt: skip
    print(f"onnxruntime {ort.__version__} CPU, {args.threads} thread(s), {args.clock} clock: "
          "median ms per batch (x baseline)\n")  # fmt: skip
    print("\n".join(markdown_table(["graph", *(f"B={b} T={t}" for b, t in SHAPES)], rows)))
    return 0
