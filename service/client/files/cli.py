"""`attnserve-client classify --input FILE --output FILE`: the file job's flags and exit
statuses (0 done, 1 the service kept refusing, 2 a usage or file error, 130 Ctrl-C, 143 SIGTERM)."""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path
from typing import Any

from attnserve.service.client.files.calls import Retry
from attnserve.service.client.files.job import classify_file, stop_on_signals
from attnserve.service.client.files.spec import FileJob
from attnserve.service.client.files.tables import FORMATS, FileError

EXIT_SIGNAL = {"SIGINT": 130, "SIGTERM": 143}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    files = parser.add_argument_group("files (instead of texts)")
    files.add_argument("--input", type=Path, help="CSV, JSONL or Parquet file of texts, a row each")
    files.add_argument(
        "--output",
        type=Path,
        help="file to write: the input's columns, label, p_<label> (multi-label models: p_<label> and "
        "assigned, the labels over their thresholds joined with |; regression models: value)",
    )
    files.add_argument("--format", choices=FORMATS, help="input format (default: from the suffix)")
    files.add_argument("--output-format", choices=FORMATS, help="output format (default: from the suffix)")
    files.add_argument("--text-column", default="text", help="the input column holding the text")
    files.add_argument(
        "--rejects", type=Path, help="rows refused, with the reason (default: OUTPUT.rejects.jsonl)"
    )
    files.add_argument("--batch-size", type=int, default=64, help="rows per call")
    files.add_argument("--workers", type=int, default=4, help="calls in flight at once")
    files.add_argument(
        "--with-attention", action="store_true", help="add tokens and pooled attention columns"
    )
    files.add_argument("--prefix", default="", help="before the added column names, e.g. pred_")
    files.add_argument(
        "--resume", action="store_true", help="carry on a stopped run from OUTPUT.progress.json"
    )
    files.add_argument("--overwrite", action="store_true", help="start again over an existing output")
    files.add_argument(
        "--retries", type=int, default=6, help="calls per batch while the server is busy or away"
    )


def job_of(args: argparse.Namespace) -> FileJob:
    if args.output is None:
        raise FileError("--input needs --output")
    if args.batch_size < 1 or args.workers < 1 or args.retries < 1:
        raise FileError("--batch-size, --workers and --retries must be at least 1")
    return FileJob(
        input=args.input,
        output=args.output,
        text_column=args.text_column,
        input_format=args.format,
        output_format=args.output_format,
        rejects=args.rejects,
        model=args.model,
        version=args.version,
        batch_size=args.batch_size,
        workers=args.workers,
        with_attention=args.with_attention,
        long_text=getattr(args, "long_text", ""),
        prefix=args.prefix,
        resume=args.resume,
        overwrite=args.overwrite,
        retry=Retry(tries=args.retries),
    )


def run(client: Any, args: argparse.Namespace) -> int:
    try:
        job = job_of(args)
        stop = threading.Event()
        with stop_on_signals(stop) as caught:
            report = classify_file(client, job, stop=stop)
    except FileError as exc:
        print(f"attnserve-client: {exc}", file=sys.stderr)
        return 2
    total = "" if report.total is None else f" of {report.total}"
    summary = f"{report.rows_done}{total} rows done, {report.rejected} rejected, {report.seconds:.1f} s"
    if report.stopped is None:
        rejects = f" (rejects: {job.rejects_path()})" if report.rejected else ""
        print(f"wrote {job.output}: {summary}{rejects}", file=sys.stderr)
        return 0
    why = caught.get("signal") or report.stopped
    print(
        f"attnserve-client: stopped ({why}): {summary}; {job.output} holds the rows done; "
        "run the same command with --resume to carry on",
        file=sys.stderr,
    )
    return EXIT_SIGNAL.get(caught.get("signal", ""), 1)
