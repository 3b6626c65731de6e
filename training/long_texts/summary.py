"""The end of `attnserve-train --long-texts windows`: the run's summary, then each split read
as truncate, mean and max, and the policy the run recorded."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from attnserve.training.cli.summary import print_summary
from attnserve.training.long_texts.fold import READINGS
from attnserve.training.long_texts.record import LONG_TEXTS_FILE


def print_long_summary(console: Console, metrics: dict[str, Any], run_dir: str) -> None:
    # Out of time, the plain summary would offer --resume, which a long-text run does not take.
    print_summary(console, {**metrics, "out_of_time": False}, run_dir)
    long = metrics["long_texts"]
    table = Table(title="accuracy per reading of the windows")
    for column in ("split", "texts", "windows", "skipped", *READINGS):
        table.add_column(column, justify="left" if column == "split" else "right")
    readings = long["readings"]
    for split in sorted(readings, key=lambda name: (name != "val", name != "test", name)):
        figures = readings[split]
        counts = long["texts"][split]
        cells = [f"{counts[k]:,}" for k in ("texts", "windows", "skipped")]
        table.add_row(split, *cells, *(f"{figures[r]:.4f}" for r in READINGS))
    console.print(table)
    policy = long["policy"]
    console.print(
        f"policy: {policy['combine']} of windows of {policy['window']} tokens sharing {policy['stride']}, "
        f"at most {policy['max_windows']} ({run_dir}/{LONG_TEXTS_FILE}); attnserve-export {run_dir} writes it"
    )
    if metrics.get("out_of_time"):
        console.print("stopped by --max-seconds: the best weights validated so far were kept")
