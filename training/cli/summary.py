"""The table `attnserve-train` prints when a run ends: each evaluated split's figures.

A single-label run shows accuracy, macro-F1, the loss and the calibration error (and the mean
absolute error of ordered labels); a multi-label run shows micro-F1, macro-F1 and exact match
at threshold 0.5 (training/report/multi_label.py), since accuracy means nothing there.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

# (column, metrics key, format) per kind of run
SINGLE = (("accuracy", "accuracy", ".4f"), ("macro-F1", "macro_f1", ".4f"))
MULTI = (
    ("micro-F1", "micro_f1", ".4f"),
    ("macro-F1", "macro_f1", ".4f"),
    ("exact match", "exact_match", ".4f"),
)


def print_summary(console: Console, metrics: dict[str, Any], run_dir: str) -> None:
    table = Table(title=f"{metrics['family']} on {metrics['task']} — {run_dir}")
    multi = bool(metrics.get("multi_label", False))
    ordered = metrics.get("ordered_labels", False) and not multi
    figures = [*(MULTI if multi else SINGLE), *([("MAE", "mae", ".3f")] if ordered else [])]
    figures += [("loss", "loss", ".4f"), *([] if multi else [("ECE", "ece", ".4f")])]
    table.add_column("split", justify="left")
    for column, _, _ in (*figures, ("n", "n", "")):
        table.add_column(column, justify="right")
    extra = [
        k for k, v in metrics.items() if isinstance(v, dict) and "macro_f1" in v and k not in ("val", "test")
    ]
    for split in ("val", "test", *extra):
        if split in metrics:
            m = metrics[split]
            table.add_row(split, *(format(m[key], fmt) for _, key, fmt in figures), str(int(m["n"])))
    console.print(table)
    pictures = "" if multi else ", confusion.png"
    console.print(
        f"params {metrics['params']:,}  train time {metrics['train_seconds']:.1f}s  best epoch "
        f"{metrics['best_epoch']}/{metrics['epochs_run']} (by {metrics['select_by']})  peak memory "
        f"{metrics['peak_rss_mb']:.0f} MB  per-{'label' if multi else 'class'} report: "
        f"{run_dir}/report.json{pictures}"
    )
    if metrics.get("warnings"):
        console.print(f"[yellow]{len(metrics['warnings'])} warning(s)[/yellow]: see above and metrics.json")
    if metrics.get("out_of_time"):
        console.print(f"stopped by --max-seconds: add --resume to the same command to continue ({run_dir})")
