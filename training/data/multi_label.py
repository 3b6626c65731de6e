"""Multi-label data: a label column whose cells each hold any number of labels.

A cell is the labels joined by a separator (``sports|politics``; ``|`` unless
``--label-separator`` says otherwise), a JSON or Parquet list of them, or empty: a text with
no label is a row the model must learn to leave unlabelled, not a missing value. The label
set is the sorted union of the labels in the training part (or ``--labels``, in its order):
a validation or test part that holds a label the training part never has is refused by name,
since the model would have no output for it. A label that only the carved-out validation or
test rows of the training file hold is a warning (training/report/multi_label.py), as a class
missing from training is for single-label data.

Rows are ``Example``s with ``label == TAGGED`` and their label ids in ``tags``; the training
loop reads them as a [N, C] 0/1 matrix (``label_matrix``). Splits carved out of a file are
drawn at random rather than stratified: label combinations are too many to stratify by.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from attnserve.training.data.core import DataError, Example
from attnserve.training.data.labels import SHOWN, LabelColumn, rows

DEFAULT_SEPARATOR = "|"
Tags = tuple[int, ...]


@dataclass(frozen=True)
class TagMap:
    names: tuple[str, ...]
    tags: list[list[Tags]]  # one list of label-id tuples per LabelColumn, in input order


def cell_labels(value: object, separator: str) -> list[str] | None:
    """The labels one cell holds (none for an empty cell); None when it is not labels at all."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return []
    if isinstance(value, bool):
        return None
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return [str(int(value))]  # a CSV cell "3" that the reader turned into a number
    if isinstance(value, float):
        return [str(value)]
    if isinstance(value, str):
        return [part.strip() for part in value.split(separator) if part.strip()]
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return [v.strip() for v in value if v.strip()]
    return None


def _cells(part: LabelColumn, column: str, separator: str) -> list[list[str]]:
    cells, bad = [], []
    for number, value in enumerate(part.values, start=1):
        labels = cell_labels(value, separator)
        if labels is None:
            bad.append(number)
            labels = []
        cells.append(sorted(set(labels)))
    if bad:
        raise DataError(
            f"{part.source}: {len(bad)} row(s) of {column!r} hold neither labels joined by {separator!r} "
            f"nor a list of label strings (rows {rows(bad)})"
        )
    return cells


def map_tags(
    parts: Sequence[LabelColumn], column: str, separator: str, names: Sequence[str] | None = None
) -> TagMap:
    """Label names (the training part's labels, sorted, unless ``names`` fixes them) and each
    row's label ids, for every part; the first part is the training part."""
    if not separator:
        raise DataError("the label separator must not be empty")
    if names is not None and len(set(names)) != len(names):
        raise DataError(f"label names must be unique, got {list(names)}")
    cells = [_cells(part, column, separator) for part in parts]
    seen = sorted({label for row in cells[0] for label in row})
    given = tuple(names) if names is not None else tuple(seen)
    if len(given) < 2:
        raise DataError(
            f"{parts[0].source}: multi-label training data needs at least 2 different labels in "
            f"{column!r}, found {list(given)}"
        )
    index = {name: i for i, name in enumerate(given)}
    for part, part_cells in zip(parts, cells, strict=True):
        unknown = sorted({label for row in part_cells for label in row} - set(index))
        if unknown:
            where = "the --labels given" if names is not None else "the labels of the training data"
            raise DataError(
                f"{part.source}: label(s) {unknown[:SHOWN]} in {column!r} are not among {where} "
                f"{list(given)}: the model would have no output for them"
            )
    tags = [[tuple(sorted(index[label] for label in row)) for row in part_cells] for part_cells in cells]
    return TagMap(given, tags)


def label_matrix(examples: Sequence[Example], num_labels: int) -> np.ndarray:
    """[N, C] float32: 1 where the row has the label. What BCEWithLogitsLoss reads."""
    matrix = np.zeros((len(examples), num_labels), dtype=np.float32)
    for row, example in enumerate(examples):
        matrix[row, list(example.tags)] = 1.0
    return matrix


def tag_names(tags: Sequence[int], names: Sequence[str], separator: str = DEFAULT_SEPARATOR) -> str:
    """A row's labels as its cell would hold them; "(none)" for a row without any."""
    return separator.join(names[t] for t in tags) or "(none)"
