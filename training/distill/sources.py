"""What ``--teacher`` names: a training run, a Hugging Face classifier folder, or a bundle.

The folder says which, as ``attnserve-export`` reads its argument (export/source.py): a run
has checkpoint.pt; a Hugging Face folder has config.json and no checkpoint (what
``save_pretrained`` writes: hf_teacher.py); a bundle version has bundle.json (bundle_teacher.py,
an imported one scored through the folder it came from where that is at hand).
``--teacher-max-len`` is for the last two: a run reads the max_len it trained with.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Literal

from attnserve.export.hf_folder import is_classifier_folder
from attnserve.service.bundle import MANIFEST_FILE
from attnserve.training.distill.bundle_teacher import is_bundle, load_bundle_teacher
from attnserve.training.distill.hf_teacher import load_folder_teacher, read_teacher_folder
from attnserve.training.distill.teacher import TeacherError, TeacherModel, load_teacher
from attnserve.training.run.checkpoint import CHECKPOINT, METRICS

log = logging.getLogger(__name__)
TeacherKind = Literal["run", "hf_folder", "bundle"]


def teacher_kind(path: Path) -> TeacherKind:
    """Which teacher ``path`` is; TeacherError when it is none."""
    if (path / CHECKPOINT).is_file():
        return "run"
    if is_classifier_folder(path):
        return "hf_folder"
    if is_bundle(path):
        return "bundle"
    raise TeacherError(
        f"--teacher {path}: no {CHECKPOINT} there; give a training run directory, a Hugging Face "
        "sequence-classifier folder (config.json, weights, tokenizer) or a bundle version folder"
    )


def open_teacher(path: str | Path, max_len: int | None = None) -> TeacherModel:
    """The teacher at ``path``, loaded; ``max_len`` (--teacher-max-len) for a folder or bundle."""
    where = Path(path)
    kind = teacher_kind(where)
    if kind == "run":
        if max_len is not None:
            raise TeacherError(
                f"--teacher-max-len is for a Hugging Face folder or a bundle; {where} is a training run, "
                "which reads the max_len it trained with"
            )
        return load_teacher(where)
    if kind == "hf_folder":
        return load_folder_teacher(where, max_len)
    return load_bundle_teacher(where, max_len)


def declared_labels(path: str | Path) -> list[str] | None:
    """The teacher's labels in its own order, read without loading a model; None when unread."""
    where = Path(path)
    kind = teacher_kind(where)
    if kind == "hf_folder":
        return read_teacher_folder(where).labels
    file = where / (METRICS if kind == "run" else MANIFEST_FILE)
    try:
        labels = json.loads(file.read_text(encoding="utf-8")).get("labels")
    except (OSError, ValueError, AttributeError):
        return None
    return labels if isinstance(labels, list) and all(isinstance(x, str) for x in labels) else None
