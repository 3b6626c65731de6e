"""``attnserve-export calibrate``: its flags and the figures it prints (calibrate.py does the work)."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from attnserve.export.calibrate import CalibrateRequest, Measured, calibrate_bundle, measure_bundle
from attnserve.export.rows_file import LABEL_COLUMN, TEXT_COLUMN
from attnserve.service.bundle import ECE_BINS, read_bundle
from attnserve.service.common.helpformat import DefaultsHelpFormatter

CALIBRATE_COMMAND = "calibrate"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"attnserve-export {CALIBRATE_COMMAND}",
        description="Publish a bundle's next version whose probabilities are softmax(logits / T), T fitted "
        "on held-out rows; or, with --measure, report how calibrated a bundle is on rows.",
        formatter_class=DefaultsHelpFormatter,
    )
    p.add_argument("bundle", type=Path, help="the bundle folder, e.g. models/mine/1")
    p.add_argument(
        "--rows",
        type=Path,
        required=True,
        help="labelled held-out rows: CSV, TSV, JSONL or Parquet; labels are the bundle's label names or "
        "their indexes",
    )
    p.add_argument("--text-column", default=TEXT_COLUMN, help="the rows' text column")
    p.add_argument("--label-column", default=LABEL_COLUMN, help="the rows' label column")
    p.add_argument(
        "--repository", type=Path, default=None, help="model repository folder; unset: the bundle's own"
    )
    p.add_argument("--name", default=None, help="model name of the new version; unset: the bundle's own")
    p.add_argument(
        "--measure",
        action="store_true",
        help="write nothing: print the bundle's ECE, mean confidence and accuracy on the rows, as served",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log each step")
    return p


def calibrate_command(argv: Sequence[str]) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    console = Console()
    if args.measure:
        with console.status(f"measuring {args.bundle} on {args.rows}"):
            measured = measure_bundle(args.bundle, args.rows, args.text_column, args.label_column)
        _print_measured(console, args.bundle, args.rows, measured)
        return 0
    request = CalibrateRequest(
        bundle=args.bundle,
        rows=args.rows,
        repository=args.repository,
        name=args.name,
        text_column=args.text_column,
        label_column=args.label_column,
    )
    with console.status(f"calibrating {args.bundle} on {args.rows}"):
        path = calibrate_bundle(request)
    manifest = read_bundle(path).manifest
    c = manifest.calibration
    assert c is not None  # calibrate_bundle writes one or raises
    table = Table(title=f"{manifest.name} version {manifest.version} (calibrated) — {path}")
    table.add_column("figure")
    table.add_column(f"T = 1 (as {args.bundle})", justify="right")
    table.add_column(f"T = {c.temperature:.4f}", justify="right")
    table.add_row(
        f"ECE ({c.bins} bins) on {c.rows} rows of {c.file}", f"{c.ece_before:.4f}", f"{c.ece_after:.4f}"
    )
    table.add_row("NLL", f"{c.nll_before:.4f}", f"{c.nll_after:.4f}")
    table.add_row("mean confidence", f"{c.confidence_before:.4f}", f"{c.confidence_after:.4f}")
    table.add_row("accuracy", f"{c.accuracy:.4f}", f"{c.accuracy:.4f}")
    console.print(table)
    console.print("These rows chose T: for a figure to report, --measure the new version on other rows.")
    return 0


def _print_measured(console: Console, bundle: Path, rows: Path, m: Measured) -> None:
    table = Table(title=f"{bundle} on {m.rows} rows of {rows.name} (model.onnx, onnxruntime CPU)")
    table.add_column("figure")
    table.add_column(f"as served (T = {m.temperature:.4f})", justify="right")
    table.add_column("T = 1", justify="right")
    table.add_row(f"ECE ({ECE_BINS} bins)", f"{m.ece:.4f}", f"{m.ece_uncalibrated:.4f}")
    table.add_row("mean confidence", f"{m.confidence:.4f}", f"{m.confidence_uncalibrated:.4f}")
    table.add_row("accuracy", f"{m.accuracy:.4f}", f"{m.accuracy:.4f}")
    table.add_row("NLL", f"{m.nll:.4f}", f"{m.nll_uncalibrated:.4f}")
    console.print(table)
