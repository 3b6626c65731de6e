"""`attnserve-train compare`: every family on one task, side by side, as a markdown table.

Same data, same seed, same trainer; only the family (and its default config) changes, so
the table shows what attention over word order buys on car-order. With several ``--seeds``
each family is trained once per seed (the seed picks the generated data, the split and the
initial weights) and the table gives the mean and the worst run.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from attnserve.training.data import (
    DEFAULT_EPOCHS,
    EVAL_SPLITS,
    HANDWRITTEN,
    PHRASING_HELDOUT,
    TEMPLATE_HELDOUT,
)
from attnserve.training.models import FAMILIES
from attnserve.training.run import DataSpec, train_run
from attnserve.training.tokenizer import KINDS
from attnserve.training.trainer import TrainConfig
from rich.console import Console
from rich.table import Table

ORDER = ("transformer", "self_attention", "attention_pool", "mean_pool", "bow_mlp")
SPLIT_TITLES = {
    TEMPLATE_HELDOUT: "held-out templates",
    PHRASING_HELDOUT: "held-out phrasings",
    HANDWRITTEN: "hand-written",
}


@dataclass(frozen=True)
class Row:
    family: str
    test: list[float]  # accuracy on held-out pairs, one per seed
    extra: dict[str, list[float]]  # accuracy per further evaluation split the task has, one per seed
    params: int
    seconds: list[float]
    cpu_seconds: list[float]
    epochs: list[int]


def _figure(values: list[float]) -> str:
    """One run: its value; several: mean (worst)."""
    if not values:
        return "—"
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.fmean(values):.3f} ({min(values):.3f})"


def _cells(row: Row, splits: Sequence[str]) -> tuple[str, ...]:
    secs, cpu = statistics.fmean(row.seconds), statistics.fmean(row.cpu_seconds)
    epochs = "/".join(str(e) for e in row.epochs)
    figures = [_figure(row.extra.get(split, [])) for split in splits]
    return (row.family, _figure(row.test), *figures, f"{row.params:,}", f"{secs:.1f} ({cpu:.1f})", epochs)


def _train_family(family: str, ns: argparse.Namespace, console: Console) -> Row:
    test: list[float] = []
    extra: dict[str, list[float]] = {}
    seconds, cpu_seconds, epochs, params = [], [], [], 0
    for seed in ns.seeds:
        console.print(f"[bold]training {family}[/bold] (seed {seed})")
        out = Path(ns.out) / family if len(ns.seeds) == 1 else Path(ns.out) / family / f"seed{seed}"
        spec = DataSpec(task=ns.task, seed=seed, tokenizer=ns.tokenizer)
        epochs = DEFAULT_EPOCHS.get(ns.task, TrainConfig.epochs)
        m = train_run(out, family, {}, TrainConfig(seed=seed, epochs=epochs), spec).metrics
        test.append(m["test"]["accuracy"])
        for split in EVAL_SPLITS:
            if split in m:
                extra.setdefault(split, []).append(m[split]["accuracy"])
        seconds.append(m["train_seconds"])
        cpu_seconds.append(m["train_cpu_seconds"])
        epochs.append(m["epochs_run"])
        params = m["params"]
    return Row(family, test, extra, params, seconds, cpu_seconds, epochs)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="attnserve-train compare", description=__doc__)
    p.add_argument("--task", default="car-order")
    p.add_argument("--out", default="runs/compare", help="one run directory per family goes here")
    p.add_argument("--table", default="docs/results/car-order.md", help="markdown table to write")
    p.add_argument("--seeds", nargs="+", type=int, default=[0], help="one run per family and seed")
    p.add_argument("--families", nargs="*", default=list(ORDER), choices=sorted(FAMILIES))
    p.add_argument("--tokenizer", default=DataSpec.tokenizer, choices=KINDS, help="tokenizer kind")
    ns = p.parse_args(argv)

    console = Console()
    rows = [_train_family(family, ns, console) for family in ns.families]

    several = len(ns.seeds) > 1
    accuracy_note = ", mean (worst) over seeds" if several else ""
    splits = [split for split in EVAL_SPLITS if any(split in row.extra for row in rows)]
    columns = (
        "family",
        f"held-out pairs{accuracy_note}",
        *(f"{SPLIT_TITLES[split]}{accuracy_note}" for split in splits),
        "params",
        "train time, s (CPU s)" + (", mean" if several else ""),
        "epochs",
    )
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = _cells(row, splits)
        lines.append(f"| `{cells[0]}` | " + " | ".join(cells[1:]) + " |")
    load = os.getloadavg()[0]  # train times are wall-clock: say how busy the machine was
    machine = (
        f"{platform.machine()}, {os.cpu_count()} cores, {torch.get_num_threads()} torch thread(s), "
        f"1-minute load average {load:.1f} at the end"
    )
    seeds = " ".join(str(s) for s in ns.seeds)
    body = "\n".join(lines)
    text = (
        f"# {ns.task}: every family, same data and trainer\n\n"
        f"Produced by `attnserve-train compare --task {ns.task} --seeds {seeds} --tokenizer {ns.tokenizer}` "
        f"on {machine}. Accuracy on each split; train time is wall-clock, CPU time in brackets.\n\n{body}\n"
    )
    Path(ns.table).parent.mkdir(parents=True, exist_ok=True)
    Path(ns.table).write_text(text)

    table = Table(title=f"{ns.task}: every family (seeds {seeds})")
    titles = [SPLIT_TITLES[s] for s in splits]
    for col in ("family", "held-out pairs", *titles, "params", "train s (CPU)", "epochs"):
        table.add_column(col)
    for row in rows:
        table.add_row(*_cells(row, splits))
    console.print(table)
    console.print(f"table written to {ns.table}")
    return 0
