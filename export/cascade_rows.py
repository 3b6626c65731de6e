"""A cascade's held-out rows, and their split into the rows that choose and the rows that report.

The threshold is the best one on the rows it is chosen on (cascade_threshold.py), so figures
measured there flatter it. The rows are therefore split in two: the threshold is chosen on
one part and the manifest's figures are measured on the other, which the choice never saw.
The split depends on the texts alone: distinct texts ordered by the sha256 of their UTF-8
bytes alternate between the parts (even ranks choose, odd ranks report), so the same file
splits the same way in any row order, and a text that occurs twice lies on one side only.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt

from attnserve.export.errors import ExportRequestError
from attnserve.export.evalset import EvalSet, read_gate_rows
from attnserve.export.rows_file import ROWS_SPLIT, read_rows_file
from attnserve.service.bundle import GateRows, sha256_file
from attnserve.training.run.checkpoint import TEST_SET

SPLIT_RULE: Literal["sha256-alternate"] = "sha256-alternate"  # the rule above, as the manifest names it
IndexArray = npt.NDArray[np.int64]


def has_rows(runs: list[Path], rows_file: Path | None) -> bool:
    """Whether the rows can be read: a --rows file, or a member run with a test split."""
    return rows_file is not None or any((run / TEST_SET).is_file() for run in runs)


def held_out_rows(runs: list[Path], rows_file: Path | None, labels: list[str]) -> tuple[EvalSet, GateRows]:
    """The run's test split (the student's run first), else ``rows_file``."""
    for run_dir in runs:
        try:
            return read_gate_rows(run_dir, len(labels), None)
        except ExportRequestError:
            continue
    if rows_file is None:
        raise ExportRequestError(
            "the cascade threshold is chosen on held-out rows: neither member is a run with a test "
            "split (test.jsonl), so give --rows FILE (text and label columns)"
        )
    rows = read_rows_file(rows_file, labels)
    named = GateRows(file=rows_file.name, split=ROWS_SPLIT, rows=len(rows), sha256=sha256_file(rows_file))
    return rows, named


def split_rows(texts: list[str]) -> tuple[IndexArray, IndexArray]:
    """Indexes into ``texts`` of the choosing part and of the reporting part, each ascending."""
    digests = {text: hashlib.sha256(text.encode("utf-8")).hexdigest() for text in texts}
    ranks = {text: rank for rank, text in enumerate(sorted(digests, key=digests.__getitem__))}
    choosing = np.asarray([i for i, text in enumerate(texts) if ranks[text] % 2 == 0], dtype=np.int64)
    reporting = np.asarray([i for i, text in enumerate(texts) if ranks[text] % 2 == 1], dtype=np.int64)
    if len(choosing) == 0 or len(reporting) == 0:
        raise ExportRequestError(
            "the cascade's held-out rows need at least two distinct texts: one part chooses the "
            f"threshold, the other reports on it ({len(digests)} distinct)"
        )
    return choosing, reporting


def part(rows: EvalSet, indexes: IndexArray) -> EvalSet:
    return EvalSet([rows.texts[int(i)] for i in indexes], rows.labels[indexes])
