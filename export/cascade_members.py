"""What a cascade's members must share: the same labels, in the same order, and one softmax.

A cascade hands a text to the teacher when the student's top softmax probability is under
the threshold (cascade_threshold.py), and either member's answer is then its argmax: both
mean one label per text. A multi-label member (a sigmoid per label, labels over their own
thresholds) or a regression has no top probability to decide on and no single answer, and
two members whose scores mean different things cannot stand in for each other. So both are
checked twice: from what each declares (a bundle's ``bundle.json``, a run's ``metrics.json``,
a Hugging Face folder's ``config.json``)
before the slow member exports, and from the members' manifests once they are placed.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from attnserve.export.errors import ExportRequestError
from attnserve.export.hf_folder import ClassifierFolder, is_classifier_folder, read_classifier_folder
from attnserve.service.bundle import MANIFEST_FILE, Problem, Scoring
from attnserve.training.run.checkpoint import CHECKPOINT

METRICS_FILE = "metrics.json"  # a training run's (training/run/checkpoint.py METRICS)


def check_labels(student: list[str] | None, teacher: list[str] | None) -> None:
    if student is not None and teacher is not None and student != teacher:
        raise ExportRequestError(
            f"the student's labels {student} and the teacher's {teacher} differ; "
            "a cascade needs the same labels in the same order"
        )


def check_scoring(student: Scoring | None, teacher: Scoring | None) -> None:
    """ExportRequestError unless both members (where known) are single-label softmax classifiers."""
    if student is not None and teacher is not None and student.problem != teacher.problem:
        raise ExportRequestError(
            f"the student is a {student.problem.value} model ({_meaning(student)}) and the teacher a "
            f"{teacher.problem.value} one ({_meaning(teacher)}): a cascade's members must mean the same "
            "by their scores, one label per text from a softmax"
        )
    for member, scoring in (("student", student), ("teacher", teacher)):
        if scoring is not None and scoring.problem != Problem.SINGLE_LABEL:
            raise ExportRequestError(
                f"the {member} is a {scoring.problem.value} model ({_meaning(scoring)}): a cascade "
                "decides on the student's top softmax probability and serves one label per text, so "
                "both members must be single-label classifiers"
            )


def declared_labels(path: Path) -> list[str] | None:
    """The labels a bundle's bundle.json, a run's metrics.json or a Hugging Face folder's
    config.json lists (id2label); None when unreadable."""
    folder = _folder(path)
    if folder is not None:
        return folder.labels
    for file in (MANIFEST_FILE, METRICS_FILE):
        labels = _read(path / file).get("labels")
        if isinstance(labels, list) and all(isinstance(label, str) for label in labels):
            return labels
    return None


def declared_scoring(path: Path) -> Scoring | None:
    """A member's scoring as it declares it: a bundle's (absent: single-label), a multi-label run's
    sigmoids, a Hugging Face folder's problem_type; None when neither file says."""
    folder = _folder(path)
    if folder is not None:
        count = len(folder.labels)
        return (
            Scoring.multi_label(count)
            if folder.problem == Problem.MULTI_LABEL
            else Scoring(problem=folder.problem)
        )
    manifest = _read(path / MANIFEST_FILE)
    if manifest:
        try:
            return Scoring.model_validate(manifest["scoring"]) if manifest.get("scoring") else Scoring()
        except ValidationError:
            return None  # verify_bundle names what is wrong with it
    metrics = _read(path / METRICS_FILE)
    if not metrics:
        return None
    labels = metrics.get("labels")
    count = len(labels) if isinstance(labels, list) else 2
    return Scoring.multi_label(count) if metrics.get("multi_label") else Scoring()


def _folder(path: Path) -> ClassifierFolder | None:
    """A Hugging Face folder's config.json, checked (refused as export refuses it); None for others."""
    if (path / CHECKPOINT).is_file() or not is_classifier_folder(path):
        return None
    return read_classifier_folder(path)


def _meaning(scoring: Scoring) -> str:
    return "a sigmoid per label" if scoring.multi else "a value" if scoring.regression else "a softmax"


def _read(path: Path) -> dict[str, object]:
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}
