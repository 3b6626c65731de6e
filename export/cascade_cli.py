"""``attnserve-export cascade``: its flags and the summary it prints (cascade.py does the work)."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from attnserve.export.cascade import CascadeRequest, export_cascade
from attnserve.export.cascade_threshold import DEFAULT_CASCADE_MAX_DROP
from attnserve.service.bundle.cascade import read_cascade
from attnserve.service.common.helpformat import DefaultsHelpFormatter

CASCADE_COMMAND = "cascade"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"attnserve-export {CASCADE_COMMAND}",
        description="Publish a student and a teacher as one model: the teacher answers the texts the "
        "student is least sure of.",
        formatter_class=DefaultsHelpFormatter,
    )
    p.add_argument("--student", type=Path, required=True, help="the student: a run folder or a bundle folder")
    p.add_argument("--teacher", type=Path, required=True, help="the teacher: a run folder or a bundle folder")
    p.add_argument("--repository", type=Path, required=True, help="model repository folder, e.g. models/")
    p.add_argument("--name", required=True, help="model name: the cascade goes to REPOSITORY/NAME/VERSION")
    p.add_argument(
        "--max-drop",
        type=float,
        default=DEFAULT_CASCADE_MAX_DROP,
        help="held-out accuracy the cascade may lose against the teacher alone (a fraction)",
    )
    p.add_argument(
        "--rows",
        type=Path,
        default=None,
        help="held-out rows (CSV, TSV, JSONL or Parquet; text and label columns) when neither member "
        "is a run with a test.jsonl",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log each step")
    return p


def cascade_command(argv: Sequence[str]) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    console = Console()
    request = CascadeRequest(
        student=args.student,
        teacher=args.teacher,
        repository=args.repository,
        name=args.name,
        max_drop=args.max_drop,
        rows=args.rows,
    )
    with console.status(f"building the cascade {args.name}"):
        path = export_cascade(request)
    manifest = read_cascade(path).manifest
    figures = manifest.figures
    table = Table(title=f"{manifest.name} version {manifest.version} (cascade) — {path}")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_row(
        f"threshold (student top probability, {manifest.decided_on} at its temperature)",
        f"{manifest.threshold:.6f}",
    )
    rows, split = figures.rows, figures.split
    assert split is not None  # export_cascade always splits
    table.add_row(
        "held-out rows (the figures below)",
        f"{split.reporting_rows} of {rows.rows} of {rows.file} ({rows.split}); the other "
        f"{split.choosing_rows} chose the threshold",
    )
    table.add_row("student accuracy", f"{figures.student_accuracy:.4f}")
    table.add_row("teacher accuracy", f"{figures.teacher_accuracy:.4f}")
    table.add_row("cascade accuracy", f"{figures.cascade_accuracy:.4f} (allowed drop {figures.max_drop:g})")
    table.add_row("texts the student answers", f"{100 * figures.student_share:.1f}%")
    console.print(table)
    return 0
