"""`attnserve-train`: train one model (or every family side by side) and print its report.

Every model-config and trainer field is a flag, generated from the frozen dataclasses so the
CLI can never drift from the code.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from attnserve.training import data as datasets
from attnserve.training.models import FAMILIES
from attnserve.training.run import DataSpec, train_run
from attnserve.training.trainer import TrainConfig

FIXED = {"vocab_size", "num_classes"}  # derived from the data, never set by hand


def _add_dataclass_flags(
    parser: argparse.ArgumentParser, cls: Any, prefix: str = "", skip: set[str] = FIXED
) -> None:
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        flag = "--" + prefix + f.name.replace("_", "-")
        default = f.default
        if isinstance(default, bool):
            parser.add_argument(
                flag, dest=prefix + f.name, action=argparse.BooleanOptionalAction, default=None
            )
        else:
            kind = type(default) if default is not None and default is not dataclasses.MISSING else str
            parser.add_argument(
                flag, dest=prefix + f.name, type=kind, default=None, help=f"default: {default}"
            )


def _picked(ns: argparse.Namespace, cls: Any, prefix: str = "") -> dict[str, Any]:
    values = {}
    for f in dataclasses.fields(cls):
        v = getattr(ns, prefix + f.name, None)
        if v is not None:
            values[f.name] = v
    return values


def _base_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="attnserve-train", description=__doc__)
    p.add_argument("--task", default="car-order", choices=list(datasets.TASKS), help="built-in task")
    p.add_argument("--model", default="transformer", choices=sorted(FAMILIES), help="model family")
    p.add_argument("--out", default="runs/default", help="run directory to write")
    p.add_argument(
        "--data", default=None, help="CSV/JSONL/Parquet file or Hugging Face dataset (instead of --task)"
    )
    p.add_argument("--text-column", default="text")
    p.add_argument("--label-column", default="label")
    p.add_argument(
        "--n-pairs", type=int, default=None, help="sentence pairs to generate (default: the task's own)"
    )
    p.add_argument("--distractor-prefix", action="store_true", help="prefix each text with another sentence")
    p.add_argument("--min-frequency", type=int, default=1, help="tokenizer: minimum word count")
    p.add_argument("-v", "--verbose", action="store_true")
    _add_dataclass_flags(p, TrainConfig, skip=set())
    return p


def _data_spec(ns: argparse.Namespace) -> DataSpec:
    return DataSpec(
        task=ns.task,
        path=ns.data,
        text_column=ns.text_column,
        label_column=ns.label_column,
        n_pairs=ns.n_pairs,
        distractor_prefix=ns.distractor_prefix,
        min_frequency=ns.min_frequency,
        seed=ns.seed if ns.seed is not None else 0,
    )


def _report(console: Console, metrics: dict[str, Any], run_dir: str) -> None:
    table = Table(title=f"{metrics['family']} on {metrics['task']} — {run_dir}")
    for col in ("split", "accuracy", "macro-F1", "loss", "Brier", "ECE", "n"):
        table.add_column(col, justify="right" if col != "split" else "left")
    for split in ("val", "test", "template_heldout"):
        if split in metrics:
            m = metrics[split]
            table.add_row(
                split,
                f"{m['accuracy']:.4f}",
                f"{m['macro_f1']:.4f}",
                f"{m['loss']:.4f}",
                f"{m['brier']:.4f}",
                f"{m['ece']:.4f}",
                str(int(m["n"])),
            )
    console.print(table)
    console.print(
        f"params {metrics['params']:,}  train time {metrics['train_seconds']:.1f}s  "
        f"best epoch {metrics['best_epoch']}/{metrics['epochs_run']}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["compare"]:
        from attnserve.training.compare import main as compare_main

        return compare_main(argv[1:])
    pre, _ = _base_parser().parse_known_args(argv)
    parser = _base_parser()
    _add_dataclass_flags(parser.add_argument_group(f"{pre.model} config"), FAMILIES[pre.model].config_cls)  # type: ignore[arg-type]
    ns = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if ns.verbose else logging.WARNING, format="%(levelname)s %(message)s"
    )
    result = train_run(
        ns.out,
        ns.model,
        _picked(ns, FAMILIES[ns.model].config_cls),
        TrainConfig(**_picked(ns, TrainConfig)),
        _data_spec(ns),
    )
    _report(Console(), result.metrics, ns.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
