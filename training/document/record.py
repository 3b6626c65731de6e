"""A document run's `document.json`: what `attnserve-train document` learned and from what.

The record names the window model (a bundle version's folder and the sha256 of the model
files it read), the long-text policy chosen on validation (`LongTexts`: window, stride, the
best of mean, max and head, and `chosen`, their validation accuracies), the head itself
whichever combination won, the data (file, rows, sha256, split) and the figures.
`attnserve-export DIR` reads it (export/document.py) to publish the window bundle's files
with the policy, after checking that the files are still the ones the head was trained on.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from attnserve.service.bundle import DocumentHead, HeadInput, LongTexts

DOCUMENT_FILE = "document.json"
CACHE_FILE = "windows.npz"  # every window's logits (and vectors), computed once (windows.py)
KIND: Literal["document-head"] = "document-head"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WindowBundle(_Strict):
    """The served model whose windows the head combines."""

    path: str  # the version folder, absolute
    name: str
    version: int
    graph: str  # the graph that gave the windows' logits: label.onnx where there is one, else model.onnx
    files: dict[str, str]  # sha256 of each model file (bundle.json aside) as training read it


class DataFile(_Strict):
    file: str
    rows: int = Field(ge=1)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class Split(_Strict):
    """How the rows were parted: a share of --data drawn with a seed, or --valid's file."""

    train: int = Field(ge=1)
    validation: int = Field(ge=1)
    fraction: float | None = None  # --validation, where the validation rows came from --data
    seed: int
    valid: DataFile | None = None  # --valid
    test: DataFile | None = None  # --test: read once, after the choice


class Data(_Strict):
    file: DataFile
    text_column: str
    label_column: str
    split: Split


class HeadTraining(_Strict):
    hidden: int
    epochs: int
    steps: int
    batch_size: int
    lr: float
    seed: int
    loss: float  # the kept epoch's mean training loss
    reads: HeadInput = "logits"  # what the head scores a window from (--head-input)
    weight_decay: float = 0.0  # the decay kept, of those tried
    best_epoch: int | None = None  # the epoch kept: the lowest validation loss
    validation_loss: dict[str, float] | None = None  # per decay tried, its lowest validation loss


class DocumentRecord(_Strict):
    kind: Literal["document-head"] = KIND
    window_model: WindowBundle
    policy: LongTexts  # what the exported version serves
    head: DocumentHead  # the learned head, kept whichever combination was chosen
    training: HeadTraining
    data: Data
    # Per part (train, validation, test where given): accuracy of truncate (the first window),
    # mean, max and head, and the part's texts and windows.
    figures: dict[str, dict[str, float]]
    seconds: dict[str, float]  # windows (cutting and the graph), head (training)


class RecordError(ValueError):
    """document.json is missing or is not a document run's record."""


def write_record(directory: Path, record: DocumentRecord) -> Path:
    """Write `document.json` atomically."""
    path = directory / DOCUMENT_FILE
    fd, temp = tempfile.mkstemp(prefix=".document-", suffix=".json", dir=directory)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        os.fchmod(handle.fileno(), 0o644)  # mkstemp's 0600 would hide it from other users
        handle.write(record.model_dump_json(indent=2) + "\n")
    os.replace(temp, path)
    return path


def read_record(directory: Path) -> DocumentRecord:
    path = directory / DOCUMENT_FILE
    try:
        return DocumentRecord.model_validate_json(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise RecordError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the file"
        raise RecordError(f"{path} is not a document run's record: {where}: {first['msg']}") from None


def is_document_run(directory: Path) -> bool:
    return (directory / DOCUMENT_FILE).is_file()
