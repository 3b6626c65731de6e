"""The long texts a document head learns from: a file's text and label columns, the labels
read against the window model's, and the rows parted into training and validation.

Files are read as training reads them (training/data/plain_files.py: CSV, TSV, JSON lines,
Parquet). A label is one of the window model's label names or, where no label is named so,
its index among them; any other label is an error naming it and its row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnserve.service.bundle import sha256_file
from attnserve.training.data.core import DataError
from attnserve.training.data.plain_files import read_labelled
from attnserve.training.document.record import DataFile


@dataclass(frozen=True)
class Rows:
    """A file's texts and their label indexes into the window model's labels."""

    texts: list[str]
    labels: np.ndarray  # [N] int64
    file: DataFile

    def __len__(self) -> int:
        return len(self.texts)

    def take(self, picked: np.ndarray) -> Rows:
        return Rows([self.texts[i] for i in picked], self.labels[picked], self.file)


def read_rows(path: Path, labels: Sequence[str], text_column: str, label_column: str) -> Rows:
    """The file's rows; DataError naming a missing column, an empty text or a foreign label."""
    columns = read_labelled(path, text_column, label_column)
    index = {name: i for i, name in enumerate(labels)}
    texts: list[str] = []
    ids: list[int] = []
    cells = zip(columns.values[text_column], columns.values[label_column], strict=True)
    for number, (text, label) in enumerate(cells, start=1):
        if not isinstance(text, str) or not text.strip():
            raise DataError(f"{path}: row {number} has no text in {text_column!r}")
        label_id = _label_id(label, index)
        if label_id is None:
            raise DataError(
                f"{path}: row {number}'s label {label!r} is not one of the window model's labels "
                f"{list(labels)}"
            )
        texts.append(text)
        ids.append(label_id)
    if not texts:
        raise DataError(f"{path} holds no rows")
    return Rows(
        texts, np.asarray(ids, np.int64), DataFile(file=str(path), rows=len(texts), sha256=sha256_file(path))
    )


def _label_id(value: object, index: dict[str, int]) -> int | None:
    """A label's index: its name (a CSV's "1" names label "1" where there is one), else an index."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str | int) and str(value) in index:
        return index[str(value)]
    if isinstance(value, int) and 0 <= value < len(index):
        return value
    return None


def split_rows(rows: Rows, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(training, validation) row indexes: a `fraction` of the rows drawn with `seed`."""
    if not 0.0 < fraction < 1.0:
        raise DataError(f"--validation {fraction}: a share of the rows between 0 and 1")
    count = round(len(rows) * fraction)
    if not 1 <= count < len(rows):
        raise DataError(
            f"--validation {fraction} of {len(rows)} rows leaves no rows to train or to validate on; "
            "give more rows or --valid FILE"
        )
    order = np.random.default_rng(seed).permutation(len(rows))
    return np.sort(order[count:]), np.sort(order[:count])
