"""Compare the ONNX exporters by the onnxruntime latency of the graphs they produce.

    .venv/bin/python -m bench exporters [--threads 1] [--rounds 5] [--budget 0.4]

Timings interleave the variants over rounds and keep each one's best median, so a neighbour's
burst of CPU does not decide the comparison; figures are ratios to TorchScript at opset 18.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch
from rich.console import Console
from rich.table import Table

from attnserve.export.contract import graph_contract
from attnserve.export.onnx import Exporter, export_model, verify_graph
from attnserve.export.parity import PROVIDER, measure_parity, random_batch, run_onnx, run_torch, torch_threads
from attnserve.export.timing import median_ms
from attnserve.training.models import build_model
from bench import sections

SHAPES = [(1, 16), (1, 64), (32, 16), (32, 64)]
VOCAB = 128  # about the car-order vocabulary


@dataclass(frozen=True)
class Variant:
    exporter: Exporter
    opset: int
    disabled_optimizers: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        extra = f" -{','.join(self.disabled_optimizers)}" if self.disabled_optimizers else ""
        return f"{self.exporter} opset {self.opset}{extra}"


VARIANTS = [
    Variant("torchscript", 17),
    Variant("torchscript", 18),
    Variant("torchscript", 20),
    Variant("dynamo", 18),
    Variant("dynamo", 20),
    Variant("dynamo", 20, ("SkipLayerNormFusion",)),
]
BASELINE = Variant("torchscript", 18)


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
    variants = [v for v in VARIANTS if args.exporter in ("all", v.exporter) or v == BASELINE]
    if args.clock == "cpu" and args.threads != 1:
        parser.error("--clock cpu measures one thread only: use it with --threads 1")
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    console = Console(width=150)
    torch.manual_seed(0)
    model = build_model("transformer", {"vocab_size": VOCAB}).eval()
    contract = graph_contract(model)
    rng = np.random.default_rng(0)
    batches = {
        shape: random_batch(rng, *shape, vocab_size=VOCAB, pad_id=0, pad_share=0.0) for shape in SHAPES
    }
    with tempfile.TemporaryDirectory() as tmp:
        sessions: dict[str, ort.InferenceSession] = {}
        for variant in variants:
            path = Path(tmp) / f"{variant.exporter}-{variant.opset}.onnx"
            if not path.exists():
                export_model(model, path, contract, opset=variant.opset, exporter=variant.exporter)
                verify_graph(path, contract)
            options = ort.SessionOptions()
            options.intra_op_num_threads = options.inter_op_num_threads = args.threads
            disabled = list(variant.disabled_optimizers)
            session = ort.InferenceSession(
                str(path), options, providers=[PROVIDER], disabled_optimizers=disabled
            )
            parity = measure_parity(model, session, max_len=64, batch_sizes=(1, 3), lengths=(2, 7))
            parity.raise_on_failure(variant.label)
            sessions[variant.label] = session
        best: dict[tuple[str, tuple[int, int]], float] = {}
        for _ in range(args.rounds):
            for shape, (ids, mask) in batches.items():
                runs = {"torch eager": partial(run_torch, model, ids, mask, None)}
                runs |= {label: partial(run_onnx, session, ids, mask) for label, session in sessions.items()}
                for label, run in runs.items():
                    with torch_threads(args.threads):
                        ms = median_ms(run, budget_s=args.budget, clock=clock)
                    best[(label, shape)] = min(best.get((label, shape), ms), ms)
    table = Table(
        title=f"onnxruntime {ort.__version__} CPU, {args.threads} thread(s), {args.clock} clock: "
        "median ms per batch (x baseline)"
    )
    table.add_column("graph")
    for batch, length in SHAPES:
        table.add_column(f"B={batch} T={length}", justify="right")
    for label in ["torch eager", *sessions]:
        pairs = [(best[(label, shape)], best[(BASELINE.label, shape)]) for shape in SHAPES]
        table.add_row(label, *(f"{own:.3f} ({own / base:.2f}x)" for own, base in pairs))
    console.print(table)
    return 0
