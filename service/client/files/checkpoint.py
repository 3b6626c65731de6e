"""The progress file beside a file job's output (`<output>.progress.json`): how many input
rows are done (written or rejected, a contiguous prefix) and the output and rejects positions
that hold them. It is replaced atomically, and only after the files it describes are on disk."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from attnserve.service.client.files.tables import FileError

FORMAT = "attnserve-file-progress/1"


@dataclass(frozen=True)
class Checkpoint:
    input: str  # the input file, resolved
    input_bytes: int  # its size: a different file is not resumed
    text_column: str
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
    staging.replace(path)


def load(path: Path, input_path: Path, text_column: str) -> Checkpoint:
    """The checkpoint a --resume carries on from, checked against the job it resumes."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        checkpoint = Checkpoint(**data)
    except FileNotFoundError:
        raise FileError(f"nothing to resume: no {path.name} (run without --resume)") from None
    except (ValueError, TypeError) as exc:
        raise FileError(f"{path.name} is damaged ({exc}); run again without --resume") from None
    if checkpoint.format != FORMAT:
        raise FileError(f"{path.name} was written by another version ({checkpoint.format})")
    here = str(input_path.resolve())
    if checkpoint.input != here or checkpoint.input_bytes != input_path.stat().st_size:
        raise FileError(
            f"{path.name} belongs to another input ({checkpoint.input}, {checkpoint.input_bytes} bytes); "
            "run without --resume to start again"
        )
    if checkpoint.text_column != text_column:
        raise FileError(f"{path.name} was made with --text-column {checkpoint.text_column!r}")
    return checkpoint
