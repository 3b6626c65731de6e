"""What ``attnserve-export FOLDER`` exports: a training run, or a Hugging Face classifier folder.

The folder says which: a training run has ``checkpoint.pt``, a Hugging Face folder has
``config.json`` (what ``save_pretrained`` writes) and no checkpoint. Either way the export
gets a ``LoadedRun`` (the model and what the bundle declares) and its ``HeldOut`` rows, so
every later step is the same. The options that only an imported model needs (``rows``,
``max_len``: a run brings its own) are refused for a run rather than silently ignored; the
rows' column names mean nothing without ``rows``.
"""

from __future__ import annotations

import pickle
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from attnserve.export.errors import ExportRequestError
from attnserve.export.held_out import HeldOut, run_held_out
from attnserve.export.hf_folder import is_classifier_folder
from attnserve.export.hf_import import import_folder, load_imported_model
from attnserve.export.rows_file import LABEL_COLUMN, TEXT_COLUMN
from attnserve.export.run_scoring import scored_held_out
from attnserve.training.models.base import Classifier
from attnserve.training.run.checkpoint import CHECKPOINT, LoadedRun, load_run

_LOAD_ERRORS = (OSError, ValueError, KeyError, RuntimeError, pickle.UnpicklingError)


def is_imported(path: Path) -> bool:
    """Whether ``path`` is a Hugging Face folder rather than a training run."""
    return not (path / CHECKPOINT).is_file() and is_classifier_folder(path)


@contextmanager
def open_source(
    path: Path,
    golden_count: int,
    *,
    rows: Path | None = None,
    max_len: int | None = None,
    text_column: str = TEXT_COLUMN,
    label_column: str = LABEL_COLUMN,
) -> Iterator[tuple[LoadedRun, HeldOut]]:
    """The model at ``path`` and its held-out rows, for the length of the block (an imported
    model's converted tokenizer lives in a scratch folder until then)."""
    if is_imported(path):
        with tempfile.TemporaryDirectory(prefix="attnserve-import-") as scratch:
            yield import_folder(
                path,
                Path(scratch),
                golden_count,
                rows=rows,
                max_len=max_len,
                text_column=text_column,
                label_column=label_column,
            )
        return
    for flag, value in (("--rows", rows), ("--max-len", max_len)):
        if value is not None:
            raise ExportRequestError(
                f"{flag} is for a Hugging Face folder; {path} is a training run, which brings its own "
                "(its test split gates int8, its max_len is the one it trained with)"
            )
    run = load_training_run(path)
    yield run, scored_held_out(run, run_held_out(run, golden_count))  # a multi-label run's thresholds


def load_training_run(path: Path) -> LoadedRun:
    try:
        return load_run(path)
    except _LOAD_ERRORS as exc:
        other = "" if (path / CHECKPOINT).is_file() else " (nor is it a Hugging Face folder: no config.json)"
        raise ExportRequestError(f"cannot load the training run {path}: {exc}{other}") from exc


def load_model(path: Path, max_len: int | None = None) -> Classifier:
    """The PyTorch model ``open_source`` exports from ``path`` (for timing it beside the graph)."""
    if is_imported(path):
        return load_imported_model(path, max_len)
    return load_training_run(path).model
