"""`attnserve-train document`: learn how a served model's windows decide a long text.

    attnserve-train document --data long.csv --window-model models/sst2-sentiment/2 --out runs/doc

Each long text is cut into windows as a server with `--long-text windows` cuts it (the
window bundle's tokenizer, --window tokens sharing --stride), every window's logits (and
pooled vector: the input of the graph's final linear layer) are computed once by the bundle's
graph with onnxruntime and cached in OUT/windows.npz, and a document head (attention over a
text's windows, scoring each from its vector and logits, or its logits alone: --head-input;
--hidden units; each --weight-decay tried, the epoch of the lowest validation loss kept) is
trained on them in seconds. The mean of the windows, the most confident window and the head
are compared on the validation rows (--validation FRACTION of --data, or --valid FILE); the
best is the policy OUT/document.json records, with every figure, and `attnserve-export OUT
--repository R --name N` publishes the window bundle's files with that policy. --test FILE
is read once, after the choice, for the figures alone.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from attnserve.export.vector_graph import NoFinalLayer
from attnserve.service.bundle import COMBINES, HEAD_INPUTS, MAX_WINDOWS, HeadInput
from attnserve.training.cli.exits import UsageError
from attnserve.training.document.data import read_rows, split_rows
from attnserve.training.document.head import (
    TRUNCATE,
    HeadSettings,
    best,
    figures,
    make_part,
    policy_with,
    train_head,
)
from attnserve.training.document.record import (
    Data,
    DocumentRecord,
    HeadTraining,
    Split,
    write_record,
)
from attnserve.training.document.windows import WindowModel, load_window_model, window_logits

log = logging.getLogger("attnserve.training.document")
PROG = "attnserve-train document"
BEST = "best"
VECTOR_DECAYS = (0.0, 1e-3, 1e-2, 1e-1)  # AdamW's decay, tried in turn over vectors


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--data", required=True, type=Path, help="long texts with labels (CSV, TSV, JSONL, Parquet)"
    )
    p.add_argument(
        "--window-model",
        required=True,
        type=Path,
        metavar="BUNDLE",
        help="a served model version folder (models/NAME/VERSION): a single-label classifier",
    )
    p.add_argument("--out", required=True, type=Path, help="the document run's folder")
    p.add_argument("--text-column", default="text", help="(default: text)")
    p.add_argument("--label-column", default="label", help="a label's name or its index (default: label)")
    w = p.add_argument_group("windows", "as attnserve-export --long-texts windows records them")
    w.add_argument(
        "--window",
        type=int,
        default=None,
        help="tokens per window, special tokens included (default: the model's max_len)",
    )
    w.add_argument(
        "--stride",
        type=int,
        default=None,
        help="tokens two neighbouring windows share (default: a quarter of a window's text tokens)",
    )
    w.add_argument(
        "--max-windows",
        type=int,
        default=MAX_WINDOWS,
        help=f"the most windows of one text; a longer text is an error (default: {MAX_WINDOWS})",
    )
    h = p.add_argument_group("the head")
    h.add_argument(
        "--head-input",
        choices=HEAD_INPUTS,
        default=None,
        help="what the head scores a window from: its pooled vector and logits, or its logits alone "
        "(default: vectors where the graph's logits come out of a final linear layer, else logits)",
    )
    h.add_argument(
        "--hidden", type=int, default=None, help="hidden units (default: 16 over vectors, 8 over logits)"
    )
    h.add_argument(
        "--weight-decay",
        type=float,
        action="append",
        default=None,
        help="AdamW's weight decay; repeat it to try several, validation loss picking one "
        f"(default: {', '.join(f'{d:g}' for d in VECTOR_DECAYS)} over vectors, 0 over logits)",
    )
    h.add_argument("--epochs", type=int, default=20, help="passes over the training texts (default: 20)")
    h.add_argument("--steps", type=int, default=0, help="optimisation steps in all; 0: --epochs (default: 0)")
    h.add_argument("--batch-size", type=int, default=64, help="texts per step (default: 64)")
    h.add_argument("--lr", type=float, default=0.01, help="Adam's learning rate (default: 0.01)")
    h.add_argument(
        "--seed", type=int, default=0, help="the head's start, the batches and the split (default: 0)"
    )
    h.add_argument(
        "--combine",
        choices=[BEST, *COMBINES],
        default=BEST,
        help="the policy recorded: the best on validation, or this one (default: best)",
    )
    d = p.add_argument_group("validation and test")
    d.add_argument(
        "--validation", type=float, default=0.2, help="share of --data to validate on (default: 0.2)"
    )
    d.add_argument("--valid", type=Path, default=None, help="validate on this file instead")
    d.add_argument("--test", type=Path, default=None, help="read once after the choice, for the figures")
    p.add_argument("-v", "--verbose", action="store_true", help="log debug detail")
    return p


def main(argv: Sequence[str], configure_logging: Callable[[bool], None]) -> int:
    ns = build_parser().parse_args(argv)
    configure_logging(ns.verbose)
    for name in ("hidden", "epochs", "batch_size"):
        if (getattr(ns, name) or 1) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
    if ns.steps < 0 or ns.lr <= 0 or any(decay < 0 for decay in ns.weight_decay or ()):
        raise UsageError("--steps and --weight-decay must be 0 or more and --lr over 0")
    model = load_window_model(ns.window_model)
    reads = _head_input(model, ns.head_input)
    hidden = ns.hidden or (16 if reads == "vectors" else 8)
    decays = tuple(ns.weight_decay or (VECTOR_DECAYS if reads == "vectors" else (0.0,)))
    policy = model.policy(ns.window, ns.stride, ns.max_windows)
    columns = (ns.text_column, ns.label_column)
    data = read_rows(ns.data, model.labels, *columns)
    if ns.valid is not None:
        valid = read_rows(ns.valid, model.labels, *columns)
        train_ids, valid_ids = np.arange(len(data)), np.arange(len(data), len(data) + len(valid))
    else:
        valid = None
        train_ids, valid_ids = split_rows(data, ns.validation, ns.seed)
    test = None if ns.test is None else read_rows(ns.test, model.labels, *columns)
    files = [part for part in (data, valid, test) if part is not None]
    texts = [text for part in files for text in part.texts]
    labels = np.concatenate([part.labels for part in files])
    where = [f"{part.file.file}: row {n}" for part in files for n in range(1, len(part) + 1)]
    started = time.perf_counter()
    rows = window_logits(model, policy, texts, where, ns.out, vectors=reads == "vectors")
    seconds = {"windows": time.perf_counter() - started}
    parts = {"train": train_ids, "validation": valid_ids}
    if test is not None:
        parts["test"] = np.arange(len(texts) - len(test), len(texts))
    laid = {
        name: make_part(rows.logits, rows.counts, ids, labels[ids], rows.vectors)
        for name, ids in parts.items()
    }
    settings = HeadSettings(
        hidden=hidden,
        epochs=ns.epochs,
        steps=ns.steps,
        batch_size=ns.batch_size,
        lr=ns.lr,
        seed=ns.seed,
        weight_decays=decays,
    )
    started = time.perf_counter()
    trained = train_head(laid["train"], laid["validation"], settings, _epoch_line)
    seconds["head"] = time.perf_counter() - started
    scoring, temperature = model.manifest.scores, model.temperature
    figs = {name: figures(part, policy, trained.head, scoring, temperature) for name, part in laid.items()}
    chosen: dict[str, float] = {combine: figs["validation"][combine] for combine in COMBINES}
    pick = best(chosen) if ns.combine == BEST else ns.combine
    final = policy_with(policy, pick, trained.head, chosen)
    split = Split(
        train=len(train_ids),
        validation=len(valid_ids),
        seed=ns.seed,
        fraction=None if valid is not None else ns.validation,
        valid=None if valid is None else valid.file,
        test=None if test is None else test.file,
    )
    record = DocumentRecord(
        window_model=model.record(),
        policy=final,
        head=trained.head,
        training=HeadTraining(
            hidden=hidden,
            epochs=trained.epochs,
            steps=trained.steps,
            batch_size=ns.batch_size,
            lr=ns.lr,
            seed=ns.seed,
            loss=trained.loss,
            reads=reads,
            weight_decay=trained.weight_decay,
            best_epoch=trained.best_epoch,
            validation_loss=trained.validation_loss,
        ),
        data=Data(file=data.file, text_column=ns.text_column, label_column=ns.label_column, split=split),
        figures=figs,
        seconds=seconds,
    )
    path = write_record(ns.out, record)
    _print_summary(Console(), figs, pick, path)
    return 0


def _head_input(model: WindowModel, asked: HeadInput | None) -> HeadInput:
    """--head-input, or its default: vectors where the graph has a final linear layer."""
    if asked == "logits":
        return "logits"
    try:
        size = model.vector_size()
    except NoFinalLayer as exc:
        if asked == "vectors":
            raise UsageError(f"--head-input vectors: {model.root / model.graph}: {exc}") from None
        log.info("the head reads the windows' logits: %s", exc)
        return "logits"
    log.info("the head reads the windows' vectors (%d values, the final layer's input) and logits", size)
    return "vectors"


def _epoch_line(epoch: int, epochs: int, loss: float, accuracy: float) -> None:
    log.info("epoch %d/%d  loss %.4f  validation accuracy (head) %.4f", epoch, epochs, loss, accuracy)


def _print_summary(console: Console, figs: dict[str, dict[str, float]], pick: str, path: Path) -> None:
    table = Table(title=f"document head over windows — {path}")
    table.add_column("part")
    for column in ("texts", "windows", TRUNCATE, *COMBINES):
        table.add_column(column, justify="right")
    for name, row in figs.items():
        cells = [f"{int(row['texts'])}", f"{int(row['windows'])}"]
        table.add_row(name, *cells, *(f"{row[c]:.4f}" for c in (TRUNCATE, *COMBINES)))
    console.print(table)
    console.print(
        f"policy: {pick} (validation accuracy {figs['validation'][pick]:.4f}); "
        f"export it with attnserve-export {path.parent} --repository R --name N"
    )
