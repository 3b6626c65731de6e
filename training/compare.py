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
from rich.console import Console
from rich.table import Table

from attnserve.training.models import FAMILIES
from attnserve.training.run import DataSpec, train_run
from attnserve.training.trainer import TrainConfig

ORDER = ("transformer", "self_attention", "attention_pool", "mean_pool", "bow_mlp")


@dataclass(frozen=True)
class Row:
    family: str
    test: list[float]  # accuracy on held-out pairs, one per seed
    template: list[float]  # accuracy on held-out templates (empty when the task has none)
    params: int
    seconds: list[float]
    epochs: list[int]


def _figure(values: list[float]) -> str:
    """One run: its value; several: mean (worst)."""
    if not values:
        return "—"
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.fmean(values):.3f} ({min(values):.3f})"


def _cells(row: Row) -> tuple[str, ...]:
    secs = statistics.fmean(row.seconds)
    epochs = "/".join(str(e) for e in row.epochs)
    return (row.family, _figure(row.test), _figure(row.template), f"{row.params:,}", f"{secs:.1f}", epochs)


def _train_family(family: str, ns: argparse.Namespace, console: Console) -> Row:
    test, template, seconds, epochs, params = [], [], [], [], 0
    for seed in ns.seeds:
        console.print(f"[bold]training {family}[/bold] (seed {seed})")
        out = Path(ns.out) / family if len(ns.seeds) == 1 else Path(ns.out) / family / f"seed{seed}"
        m = train_run(out, family, {}, TrainConfig(seed=seed), DataSpec(task=ns.task, seed=seed)).metrics
        test.append(m["test"]["accuracy"])
        if "template_heldout" in m:
            template.append(m["template_heldout"]["accuracy"])
        seconds.append(m["train_seconds"])
        epochs.append(m["epochs_run"])
        params = m["params"]
    return Row(family, test, template, params, seconds, epochs)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="attnserve-train compare", description=__doc__)
    p.add_argument("--task", default="car-order")
    p.add_argument("--out", default="runs/compare", help="one run directory per family goes here")
    p.add_argument("--table", default="docs/results/car-order.md", help="markdown table to write")
    p.add_argument("--seeds", nargs="+", type=int, default=[0], help="one run per family and seed")
    p.add_argument("--families", nargs="*", default=list(ORDER), choices=sorted(FAMILIES))
    ns = p.parse_args(argv)

    console = Console()
    rows = [_train_family(family, ns, console) for family in ns.families]

    several = len(ns.seeds) > 1
    accuracy_note = ", mean (worst) over seeds" if several else ""
    columns = (
        "family",
        f"test accuracy (held-out pairs){accuracy_note}",
        f"template-held-out accuracy{accuracy_note}",
        "params",
        "train time (s)" + (", mean" if several else ""),
        "epochs",
    )
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = _cells(row)
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
        f"Produced by `attnserve-train compare --task {ns.task} --seeds {seeds}` on {machine}.\n\n{body}\n"
    )
    Path(ns.table).parent.mkdir(parents=True, exist_ok=True)
    Path(ns.table).write_text(text)

    table = Table(title=f"{ns.task}: every family (seeds {seeds})")
    for col in ("family", "test acc", "template-held-out acc", "params", "train s", "epochs"):
        table.add_column(col)
    for row in rows:
        table.add_row(*_cells(row))
    console.print(table)
    console.print(f"table written to {ns.table}")
    return 0
