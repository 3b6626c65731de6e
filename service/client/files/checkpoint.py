"""The progress file beside a file job's output (`<output>.progress.json`): how many input
rows are done (written or rejected, a contiguous prefix), the output and rejects positions
that hold them, and everything that shapes those rows (`Shape`), so that a resumed run
cannot append rows of another model or with other columns. It is replaced atomically, and
only after the files it describes are on disk."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from attnserve.service.client.files import durable
from attnserve.service.client.files.tables import FileError

FORMAT = "attnserve-file-progress/2"


@dataclass(frozen=True)
class Shape:
    """What decides the rows a run writes: a resumed run must match the first one exactly."""

    model: str  # the name the server answered with
    version: int  # the version that answered (what `latest` resolved to)
    labels: list[str]
    text_column: str
    input_format: str
    output_format: str
    prefix: str
    with_attention: bool
    columns: list[str]  # the output's columns (the header of a CSV output)
    rejects: str  # the rejects file, resolved
    long_text: str = ""  # --long-text ("": the server's); absent from the files of earlier runs


# How each difference is named to the user: the flag that sets it, or what it is.
_NAMES = {
    "model": "--model",
    "version": "model version (--version; 0 is whatever the server serves as latest now)",
    "labels": "the model's labels",
    "text_column": "--text-column",
    "input_format": "--format",
    "output_format": "--output-format",
    "prefix": "--prefix",
    "with_attention": "--with-attention",
    "columns": "output columns",
    "rejects": "--rejects",
    "long_text": "--long-text",
}


@dataclass(frozen=True)
class Checkpoint:
    input: str  # the input file, resolved
    input_bytes: int  # its size: a different file is not resumed
    shape: Shape
    rows_done: int
    output_position: int
    rejects_position: int
    rejected: int
    format: str = FORMAT


def progress_path(output: Path) -> Path:
    return output.with_name(output.name + ".progress.json")


def save(path: Path, checkpoint: Checkpoint) -> None:
    staging = path.with_name(path.name + ".tmp")
    with staging.open("w", encoding="utf-8") as handle:
        json.dump(asdict(checkpoint), handle)
        handle.flush()
        os.fsync(handle.fileno())
    durable.replace(staging, path)


def _parse(path: Path) -> Checkpoint:
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileError(f"nothing to resume: no {path.name} (run without --resume)") from None
    except ValueError as exc:
        raise FileError(f"{path.name} is damaged ({exc}); run again with --overwrite") from None
    found = data.get("format") if isinstance(data, dict) else None
    if found != FORMAT:
        raise FileError(
            f"{path.name} was written by another version of attnserve-client ({found}); "
            "run again with --overwrite"
        )
    try:
        return Checkpoint(**{**data, "shape": Shape(**data["shape"])})
    except (KeyError, TypeError) as exc:
        raise FileError(f"{path.name} is damaged ({exc}); run again with --overwrite") from None


def differences(then: Shape, now: Shape) -> list[str]:
    return [
        f"{_NAMES[field.name]}: {getattr(then, field.name)!r} then, {getattr(now, field.name)!r} now"
        for field in fields(Shape)
        if getattr(then, field.name) != getattr(now, field.name)
    ]


def load(path: Path, input_path: Path, shape: Shape) -> Checkpoint:
    """The checkpoint a --resume carries on from, checked against the job it resumes."""
    checkpoint = _parse(path)
    here = str(input_path.resolve())
    if checkpoint.input != here or checkpoint.input_bytes != input_path.stat().st_size:
        raise FileError(
            f"{path.name} belongs to another input ({checkpoint.input}, {checkpoint.input_bytes} bytes); "
            "run without --resume to start again"
        )
    changed = differences(checkpoint.shape, shape)
    if changed:
        raise FileError(
            f"cannot resume: the rows done so far were made differently ({'; '.join(changed)}); "
            "resume with what the first run had, or start again with --overwrite"
        )
    return checkpoint
