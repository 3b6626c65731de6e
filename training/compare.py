"""`attnserve-train compare`: every family on one task, side by side, as a markdown table.

Same data, same seed, same trainer; only the family (and its default config) changes, so
the table shows what attention over word order buys on car-order.
"""

from __future__ import annotations

import argparse
import os
import platform
from collections.abc import Sequence
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from training.models import FAMILIES
from training.run import DataSpec, train_run
from training.trainer import TrainConfig

ORDER = ("transformer", "self_attention", "attention_pool", "mean_pool", "bow_mlp")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="attnserve-train compare", description=__doc__)
    p.add_argument("--task", default="car-order")
    p.add_argument("--out", default="runs/compare", help="one run directory per family goes here")
    p.add_argument("--table", default="docs/results/car-order.md", help="markdown table to write")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--families", nargs="*", default=list(ORDER), choices=sorted(FAMILIES))
    ns = p.parse_args(argv)

    rows = []
    console = Console()
    for family in ns.families:
        console.print(f"[bold]training {family}[/bold]")
        res = train_run(
            Path(ns.out) / family, family, {}, TrainConfig(seed=ns.seed), DataSpec(task=ns.task, seed=ns.seed)
        )
        m = res.metrics
        rows.append(
            (
                family,
                m["test"]["accuracy"],
                m.get("template_heldout", {}).get("accuracy"),
                m["params"],
                m["train_seconds"],
                m["epochs_run"],
            )
        )

    header = (
        "| family | test accuracy (held-out pairs) | template-held-out accuracy "
        "| params | train time (s) | epochs |"
    )
    lines = [header, "|---|---|---|---|---|---|"]
    for fam, acc, tmpl, params, secs, epochs in rows:
        tmpl_s = f"{tmpl:.3f}" if tmpl is not None else "—"
        lines.append(f"| `{fam}` | {acc:.3f} | {tmpl_s} | {params:,} | {secs:.1f} | {epochs} |")
    load = os.getloadavg()[0]  # train times are wall-clock: say how busy the machine was
    machine = (
        f"{platform.machine()}, {os.cpu_count()} cores, {torch.get_num_threads()} torch thread(s), "
        f"1-minute load average {load:.1f} at the end"
    )
    body = "\n".join(lines)
    text = (
        f"# {ns.task}: every family, same data and trainer\n\n"
        f"Produced by `attnserve-train compare --task {ns.task} --seed {ns.seed}` on {machine}.\n\n{body}\n"
    )
    Path(ns.table).parent.mkdir(parents=True, exist_ok=True)
    Path(ns.table).write_text(text)

    table = Table(title=f"{ns.task}: every family")
    for col in ("family", "test acc", "template-held-out acc", "params", "train s", "epochs"):
        table.add_column(col)
    for fam, acc, tmpl, params, secs, epochs in rows:
        table.add_row(
            fam,
            f"{acc:.3f}",
            "—" if tmpl is None else f"{tmpl:.3f}",
            f"{params:,}",
            f"{secs:.1f}",
            str(epochs),
        )
    console.print(table)
    console.print(f"table written to {ns.table}")
    return 0
