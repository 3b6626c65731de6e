"""A labelled rows file named on the command line (``--rows``): held-out texts with their labels.

CSV, TSV, JSON lines (or one JSON array) and Parquet are read as training reads its files
(training/data/plain_files.py), keeping a text column and a label column. A label is one of
the bundle's label names or its index among them, so SST-2's ``negative``/``positive``
column and a JSONL file of indexes both read against a bundle labelled
``["negative", "positive"]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from attnserve.export.errors import ExportRequestError
from attnserve.export.evalset import EvalSet
from attnserve.training.data.core import DataError
from attnserve.training.data.plain_files import Columns, read_labelled

TEXT_COLUMN = "text"
LABEL_COLUMN = "label"
ROWS_SPLIT = "rows"  # how the manifest names rows given with --rows


def read_columns(path: Path, text_column: str, label_column: str) -> Columns:
    """A --rows file's text and label columns; ExportRequestError naming a missing file or
    column (and the columns the file has)."""
    try:
        return read_labelled(path, text_column, label_column)
    except DataError as exc:
        raise ExportRequestError(f"--rows {exc}") from None


def read_rows_file(
    path: Path, labels: Sequence[str], text_column: str = TEXT_COLUMN, label_column: str = LABEL_COLUMN
) -> EvalSet:
    """The file's texts and label indexes into ``labels``; ExportRequestError naming the first
    problem (a missing column, an empty text, a label the bundle does not have)."""
    columns = read_columns(path, text_column, label_column)
    index = {name: i for i, name in enumerate(labels)}
    # A CSV cell is text that training's reader turned into a number: "3" names the label "3"
    # where the bundle has one, and is an index only otherwise. JSON keeps its types.
    cells_are_text = path.suffix.lower() in (".csv", ".tsv")
    texts: list[str] = []
    ids: list[int] = []
    for number, (text, label) in enumerate(
        zip(columns.values[text_column], columns.values[label_column], strict=True), start=1
    ):
        if not isinstance(text, str):
            raise ExportRequestError(f"--rows {path}: row {number} has no text in {text_column!r}")
        label_id = _label_id(label, index, cells_are_text)
        if label_id is None:
            raise ExportRequestError(
                f"--rows {path}: row {number}'s label {label!r} is neither one of {list(labels)} "
                f"nor an index into them"
            )
        texts.append(text)
        ids.append(label_id)
    if not texts:
        raise ExportRequestError(f"--rows {path} holds no rows")
    return EvalSet(texts, np.asarray(ids, dtype=np.int64))


def _label_id(value: object, index: dict[str, int], cells_are_text: bool) -> int | None:
    if isinstance(value, str) and value in index:
        return index[value]
    if cells_are_text and isinstance(value, int) and str(value) in index:
        return index[str(value)]
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(index):
        return value
    return None
