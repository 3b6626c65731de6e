"""`attnserve-export`: turn a training run into a proven, versioned model bundle.

    attnserve-export RUN_DIR --repository models --name NAME [--version N]
                     [--quantize int8] [--optimize] [--opset 18] [--exporter torchscript]
    attnserve-export HF_FOLDER --repository models --name NAME [--rows FILE] [--max-len N]
                     [--text-column text] [--label-column label] [...]
    attnserve-export DOCUMENT_RUN --repository models --name NAME [--version N]
    attnserve-export cascade --student S --teacher T --repository models --name NAME
                     [--max-drop 0.005] [--rows FILE]
    attnserve-export calibrate BUNDLE_DIR --rows FILE [--repository R --name N] [--measure]
    attnserve-export --to-hf RUN_DIR OUT [--overwrite]

Every proof (ONNX checker, symbolic dims, parity with PyTorch, int8 accuracy, the bundle
read back) must pass, or nothing is published and the command exits non-zero with a message
naming the mismatch. On success it prints the files, parity figures and the latency of
onnxruntime against PyTorch measured there and then. A Hugging Face sequence-classifier
folder (config.json, weights, tokenizer: what save_pretrained writes) exports the same way,
proven against transformers itself (source.py, hf_import.py); --to-hf writes an encoder run
as such a folder, proven the same way (to_hf.py). A document run (`attnserve-train document`)
publishes its window bundle's files with the long-text policy it learned (document.py).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from attnserve.export.calibrate_cli import CALIBRATE_COMMAND, calibrate_command
from attnserve.export.cascade_cli import CASCADE_COMMAND, cascade_command
from attnserve.export.document import document_command, is_document_run
from attnserve.export.errors import ExportError, ExportRequestError
from attnserve.export.golden import DEFAULT_COUNT
from attnserve.export.long_texts_cli import add_long_text_flags, long_text_policy
from attnserve.export.onnx import DEFAULT_EXPORTER, DEFAULT_OPSET, EXPORTERS
from attnserve.export.parity import DEFAULT_TOLERANCE
from attnserve.export.pipeline import NO_QUANTIZATION
from attnserve.export.quantize import DEFAULT_INT8_TOLERANCE, DEFAULT_MAX_DROP, METHODS
from attnserve.export.rows_file import LABEL_COLUMN, TEXT_COLUMN
from attnserve.export.source import is_imported, load_model
from attnserve.export.timing import DEFAULT_LENGTH, Latency, measure_latency
from attnserve.export.to_hf import TO_HF_FLAG, to_hf_command
from attnserve.export.writer import export_run
from attnserve.service.bundle import (
    BundleError,
    BundleManifest,
    Problem,
    read_bundle,
)
from attnserve.service.common.helpformat import DefaultsHelpFormatter
from attnserve.training.cli.exits import run_cli

PROG = "attnserve-export"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description=__doc__.split("\n\n")[0], formatter_class=DefaultsHelpFormatter
    )
    p.add_argument(
        "run_dir",
        type=Path,
        help="training run directory (checkpoint.pt, tokenizer.json, eval.jsonl), a Hugging Face "
        "sequence-classifier folder (config.json, weights, tokenizer files), or a document run "
        "(document.json)",
    )
    p.add_argument("--repository", type=Path, required=True, help="model repository folder, e.g. models/")
    p.add_argument("--name", required=True, help="model name: the bundle goes to REPOSITORY/NAME/VERSION")
    p.add_argument("--version", type=int, default=None, help="version number; unset = the next free one")
    p.add_argument(
        "--quantize",
        choices=(*METHODS, NO_QUANTIZATION),
        default=None,
        help="int8: both graphs dynamic-int8; none: both float32; unset: float32, and an encoder's "
        "label graph int8 per channel when its gate holds on the run's test split",
    )
    p.add_argument(
        "--max-accuracy-drop",
        type=float,
        default=DEFAULT_MAX_DROP * 100,
        help="int8 (--quantize int8, or an encoder's label graph): refuse it if accuracy on the run's "
        "test split (a Hugging Face folder: --rows) drops by more than this many points",
    )
    p.add_argument(
        "--int8-tolerance",
        type=float,
        default=DEFAULT_INT8_TOLERANCE,
        help="int8 (--quantize int8, or an encoder's label graph): max |int8 - PyTorch| output on the "
        "golden cases, and their tolerance",
    )
    p.add_argument(
        "--rows",
        type=Path,
        default=None,
        help="a Hugging Face folder's held-out rows (CSV, TSV, JSONL or Parquet with text and label "
        "columns): the int8 gates, golden texts, data profile and a multi-label model's thresholds; the "
        "label is a label's name or index, a multi-label row's names separated by '|', a regression's "
        "value; unset: float32, built-in golden texts, thresholds 0.5",
    )
    p.add_argument("--text-column", default=TEXT_COLUMN, help="--rows: the text column (SST-2's: sentence)")
    p.add_argument("--label-column", default=LABEL_COLUMN, help="--rows: the label column")
    p.add_argument(
        "--max-len",
        type=int,
        default=None,
        help="a Hugging Face folder's longest input in tokens; unset: the model's and tokenizer's limit",
    )
    add_long_text_flags(p)
    p.add_argument("--optimize", action="store_true", help="store the ORT_ENABLE_EXTENDED-optimized graph")
    p.add_argument("--opset", type=int, default=DEFAULT_OPSET, help="ONNX opset (>= 17)")
    p.add_argument("--exporter", choices=EXPORTERS, default=DEFAULT_EXPORTER, help="torch.onnx exporter")
    p.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE, help="max abs difference vs PyTorch")
    p.add_argument("--golden", type=int, default=DEFAULT_COUNT, help="golden cases stored in bundle.json")
    p.add_argument("--seed", type=int, default=0, help="seed of the parity batches")
    p.add_argument(
        "--no-calibration",
        action="store_true",
        help="fit no temperature on the validation split: probabilities served as softmax(logits), as "
        "they always are for a Hugging Face folder",
    )
    p.add_argument("--latency-length", type=int, default=DEFAULT_LENGTH, help="tokens per row when timing")
    p.add_argument("--latency-threads", type=int, default=1, help="threads for both runtimes when timing")
    p.add_argument("--no-latency", action="store_true", help="skip the latency comparison")
    p.add_argument("-v", "--verbose", action="store_true", help="log each step")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Export; a bad request exits 2 with one line, a failed proof exits 1 naming the mismatch."""
    args = list(sys.argv[1:] if argv is None else argv)
    body = _export
    # A run folder is never called "cascade" or "calibrate" without a path.
    if args[:1] == [CASCADE_COMMAND]:
        body, args = cascade_command, args[1:]
    elif args[:1] == [CALIBRATE_COMMAND]:
        body, args = calibrate_command, args[1:]
    elif args[:1] == [TO_HF_FLAG]:
        body, args = to_hf_command, args[1:]
    return run_cli(
        PROG,
        body,
        args,
        user_errors=(ExportRequestError,),
        failures=(ExportError, BundleError),
        failure_label="export failed",
    )


def _export(argv: Sequence[str]) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    if is_document_run(args.run_dir):
        return document_command(args, parser)
    console = Console()
    with console.status(f"exporting {args.run_dir} as {args.name}"):
        path = export_run(
            args.run_dir,
            args.repository,
            args.name,
            args.version,
            quantize=args.quantize,
            optimize=args.optimize,
            opset=args.opset,
            exporter=args.exporter,
            tolerance=args.tolerance,
            max_accuracy_drop=args.max_accuracy_drop / 100,
            int8_tolerance=args.int8_tolerance,
            golden_count=args.golden,
            seed=args.seed,
            calibrate=not args.no_calibration,
            rows=args.rows,
            max_len=args.max_len,
            text_column=args.text_column,
            label_column=args.label_column,
            long_texts=long_text_policy(args),
        )
    bundle = read_bundle(path)
    latency: list[Latency] = []
    if not args.no_latency:
        with console.status("timing PyTorch and onnxruntime"):
            model = load_model(args.run_dir, args.max_len)
            latency = measure_latency(
                model, bundle.model_path, length=args.latency_length, threads=args.latency_threads
            )
    # An imported model's PyTorch side is transformers' own classifier (hf_model.py).
    reference = "transformers" if is_imported(args.run_dir) else "PyTorch"
    _report(console, path, bundle.manifest, latency, tolerance=args.tolerance, optimized=args.optimize,
            reference=reference)  # fmt: skip
    return 0


def _report(
    console: Console,
    path: Path,
    manifest: BundleManifest,
    latency: list[Latency],
    *,
    tolerance: float,
    optimized: bool,
    reference: str = "PyTorch",
) -> None:
    files = Table(title=f"{manifest.name} version {manifest.version} — {path}")
    for column in ("file", "size", "sha256"):
        files.add_column(column, justify="right" if column == "size" else "left")
    for name in sorted([*manifest.files, "bundle.json"]):
        digest = manifest.files.get(name, "")
        files.add_row(name, _size((path / name).stat().st_size), digest[:16] + ("…" if digest else ""))
    console.print(files)
    graph = ("dynamic-int8" if manifest.quantization else "float32") + (
        ", onnxruntime-optimized" if optimized else ""
    )
    console.print(
        f"{manifest.family} · {len(manifest.labels)} classes · max_len {manifest.max_len} · "
        f"opset {manifest.opset} · "
        f"{manifest.exporter} exporter · {graph} graph · attention {manifest.attention.kind}"
    )
    proofs = Table(title="proofs (all passed)")
    proofs.add_column("check")
    proofs.add_column("result")
    proofs.add_row("onnx.checker (full) + shape inference", "passed")
    if manifest.parity is not None:
        parity = manifest.parity
        gate = "recorded; int8 is gated on held-out rows" if manifest.quantization else f"<= {tolerance:g}"
        proofs.add_row(
            "symbolic batch/sequence dims",
            f"ran at lengths {parity.lengths} x batch sizes {parity.batch_sizes} ({parity.provider})",
        )
        proofs.add_row(f"logits max |Δ| vs {reference}", f"{parity.logits_max_abs_diff:.2e} ({gate})")
        if (attention := parity.attention_max_abs_diff) is not None:
            proofs.add_row(f"attention max |Δ| vs {reference}", f"{attention:.2e} ({gate})")
            proofs.add_row("attention on padded positions", "exactly 0")
    if manifest.quantization is not None:
        q = manifest.quantization
        where = f"{q.rows.rows} rows of {q.rows.file}" if q.rows is not None else "the validation split"
        proofs.add_row(
            f"int8 held-out {q.metric}",
            f"{q.before:.4f} -> {q.after:.4f} on {where} ({100 * (q.after - q.before):+.2f} points; "
            f"allowed drop {100 * q.max_drop:.2f})",
        )
        if q.tolerance is not None:
            proofs.add_row(f"int8 golden outputs vs {reference}", f"within the declared {q.tolerance:g}")
    proofs.add_row(
        "bundle read back", f"sha256 verified, I/O as declared, {len(manifest.golden)} golden cases match"
    )
    console.print(proofs)
    s = manifest.scoring
    if s is not None and s.thresholds is not None:
        chosen = s.chosen
        where = f" on {chosen.rows} rows of {chosen.file}" if chosen is not None and chosen.file else ""
        limits = ", ".join(f"{label} {t:.4g}" for label, t in zip(manifest.labels, s.thresholds, strict=True))
        console.print(f"a sigmoid per label, assigned at or over its threshold ({limits}){where}")
    elif s is not None and s.regression:
        console.print("regression: the one output is served as the value")
    c = manifest.calibration
    if s is None or s.problem == Problem.SINGLE_LABEL:  # a temperature divides a softmax's logits only
        console.print(
            "probabilities served at T = 1 (no temperature fitted)"
            if c is None
            else f"temperature {c.temperature:.4f}, fitted on {c.rows} {c.split} rows ({c.file}): ECE "
            f"{c.ece_before:.4f} -> {c.ece_after:.4f}, mean confidence {c.confidence_before:.4f} -> "
            f"{c.confidence_after:.4f} at accuracy {c.accuracy:.4f}"
        )
    if latency:
        table = Table(title="latency, median per batch (same threads for both)")
        for column in ("batch", "tokens/row", "PyTorch ms", "onnxruntime ms", "onnxruntime speed-up"):
            table.add_column(column, justify="right")
        for row in latency:
            table.add_row(
                str(row.batch),
                str(row.length),
                f"{row.torch_ms:.3f}",
                f"{row.onnx_ms:.3f}",
                f"{row.speedup:.2f}x",
            )
        console.print(table)


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / (1024 * 1024):.1f} MiB"


if __name__ == "__main__":
    sys.exit(main())
