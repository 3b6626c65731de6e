"""``--rows`` of a multi-label or a regression model, and the scoring the bundle declares for it.

A single-label model's rows hold one label per text (rows_file.py). The other two kinds hold
what their scores are compared with:

- multi-label: the label column lists the labels a text carries, separated by ``|`` (an
  empty cell: none; JSON may give a list of names instead), each one of id2label's names;
- regression: the label column holds the value, a number.

A multi-label model's thresholds are chosen on these rows (thresholds.py), from transformers'
own logits through the tokenizer file the bundle ships, and the manifest names the rows (file,
count, sha256); without rows each label's threshold is 0.5, where transformers' loss puts the
decision. The int8 gates then score the same rows with micro-F1 at those thresholds. A
regression's rows give the golden texts and prove the tokenizer; nothing is chosen on them.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import torch

from attnserve.export.errors import ExportRequestError
from attnserve.export.evalset import EvalSet, chunked_logits
from attnserve.export.rows_file import read_columns
from attnserve.export.thresholds import choose_thresholds, label_f1
from attnserve.service.bundle import Problem, Scoring, Thresholds, Truncation, sha256_file
from attnserve.training.models.base import Classifier

log = logging.getLogger(__name__)
SEPARATOR = "|"  # between the labels of one multi-label row
CHOSEN_BY_F1 = "f1 per label"  # Thresholds.method of thresholds chosen on --rows
CHUNK = 64


@dataclass(frozen=True)
class ProblemRows:
    file: Path
    texts: list[str]
    targets: npt.NDArray[
        np.float32
    ]  # multi-label: [N, C] 1 where the row carries the label; regression: [N, 1]

    def __len__(self) -> int:
        return len(self.texts)

    def eval_set(self) -> EvalSet:
        """The rows as the int8 gates read them: each row's labels [N, C] as 0/1 (quantize.MicroF1)."""
        return EvalSet(self.texts, self.targets.astype(np.int64))


def read_problem_rows(
    path: Path, labels: Sequence[str], problem: Problem, text_column: str, label_column: str
) -> ProblemRows:
    """The file's texts and targets; ExportRequestError naming the first problem (a missing
    column, an empty text, a label the model does not have, a value that is not a number)."""
    if problem == Problem.SINGLE_LABEL:
        raise ValueError("a single-label model's rows are read by rows_file.read_rows_file")
    columns = read_columns(path, text_column, label_column)
    index = {name: i for i, name in enumerate(labels)}
    texts: list[str] = []
    targets: list[list[float]] = []
    for number, (text, cell) in enumerate(
        zip(columns.values[text_column], columns.values[label_column], strict=True), start=1
    ):
        if not isinstance(text, str):
            raise ExportRequestError(f"--rows {path}: row {number} has no text in {text_column!r}")
        where = f"--rows {path}: row {number}"
        texts.append(text)
        if problem == Problem.MULTI_LABEL:
            targets.append(_label_set(cell, index, where))
        else:
            targets.append([_value(cell, where)])
    if not texts:
        raise ExportRequestError(f"--rows {path} holds no rows")
    return ProblemRows(path, texts, np.asarray(targets, dtype=np.float32))


def _label_set(cell: object, index: dict[str, int], where: str) -> list[float]:
    if cell is None:
        names: list[str] = []
    elif isinstance(cell, list) and all(isinstance(name, str) for name in cell):
        names = cell
    elif isinstance(cell, str | int) and not isinstance(cell, bool):  # a CSV cell "3" reads as 3
        names = [name.strip() for name in str(cell).split(SEPARATOR) if name.strip()]
    else:
        raise ExportRequestError(
            f"{where}'s labels {cell!r} are neither names separated by {SEPARATOR!r} nor a list of names"
        )
    row = [0.0] * len(index)
    for name in names:
        if name not in index:
            raise ExportRequestError(f"{where} names the label {name!r}, which is not one of {list(index)}")
        row[index[name]] = 1.0
    return row


def _value(cell: object, where: str) -> float:
    value: float | None = None
    if isinstance(cell, int | float) and not isinstance(cell, bool):
        value = float(cell)
    elif isinstance(cell, str):
        try:
            value = float(cell)
        except ValueError:
            value = None
    if value is None or not math.isfinite(value):
        raise ExportRequestError(
            f"{where}'s value {cell!r} is not a number; a regression's rows hold its value"
        )
    return value


def golden_texts(rows: ProblemRows, problem: Problem, count: int) -> list[str]:
    """The first row carrying each label (multi-label), then the next rows, ``count`` in all."""
    picked: list[int] = []
    if problem == Problem.MULTI_LABEL:
        carrying = [np.flatnonzero(rows.targets[:, c]) for c in range(rows.targets.shape[1])]
        picked = sorted({int(found[0]) for found in carrying if len(found)})[:count]
    picked += [i for i in range(len(rows)) if i not in picked][: count - len(picked)]
    return [rows.texts[i] for i in picked]


def problem_scoring(
    problem: Problem,
    labels: Sequence[str],
    rows: ProblemRows | None,
    model: Classifier,
    tokenizer: Path,
    max_len: int,
    truncation: Truncation,
) -> Scoring | None:
    """The bundle's scoring: None for a softmax (as every bundle before it), the value for a
    regression, sigmoids at 0.5 or at the thresholds ``rows`` choose for a multi-label model."""
    if problem == Problem.SINGLE_LABEL:
        return None
    if problem == Problem.REGRESSION:
        return Scoring(problem=Problem.REGRESSION)
    if rows is None:
        log.info("thresholds: 0.5 per label (no --rows to choose them on)")
        return Scoring.multi_label(len(labels))
    scoring = Scoring.multi_label(len(labels))
    probabilities = scoring.probabilities(model_logits(model, tokenizer, rows.texts, max_len, truncation))
    targets = rows.targets.astype(bool)
    thresholds = choose_thresholds(probabilities, targets)
    for c, (name, threshold) in enumerate(zip(labels, thresholds, strict=True)):
        log.info(
            "threshold of %s: %.4g (F1 on the rows %.4f; at 0.5 %.4f)", name, threshold,
            label_f1(probabilities[:, c], targets[:, c], threshold),
            label_f1(probabilities[:, c], targets[:, c], 0.5),
        )  # fmt: skip
    chosen = Thresholds(
        method=CHOSEN_BY_F1, file=rows.file.name, rows=len(rows), sha256=sha256_file(rows.file)
    )
    return Scoring.multi_label(len(labels), thresholds, chosen)


def model_logits(
    model: Classifier, tokenizer: Path, texts: list[str], max_len: int, truncation: Truncation
) -> npt.NDArray[np.float32]:
    """[N, C] PyTorch logits of ``texts`` in their order, encoded with the bundle's tokenizer
    file and cut on the served side, so a threshold is chosen on what the server will see."""

    def run(ids: npt.NDArray[np.int64], mask: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        with torch.inference_mode():
            logits = model.logits(torch.from_numpy(ids), torch.from_numpy(mask)).float().numpy()
        return np.asarray(logits, np.float32)

    out = chunked_logits(run, tokenizer, texts, max_len, truncation, CHUNK)
    if out is None:
        raise ExportRequestError("no rows to choose thresholds on")
    return out
