"""The cascade's threshold, chosen on held-out rows from both members' probabilities.

The student answers a text when its top probability is at least the threshold; the teacher
answers the rest. Among the thresholds that keep the cascade's accuracy within ``max_drop`` of
the teacher's, the one that leaves the student the most texts wins: every candidate is one of
the student's own confidences (or just above the largest, sending every text on). The
student's confidences are those of its model.onnx at its calibrated temperature: the graph
the server decides on for every call, whatever attention the call asks, so that a text's
member does not depend on the call (float32 unless the student was exported --quantize int8,
whose dynamic int8 also depends a little on the batch).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from attnserve.export.errors import ExportError, ExportRequestError
from attnserve.export.evalset import graph_logits
from attnserve.export.parity import cpu_session
from attnserve.export.quantize import DEFAULT_MAX_DROP
from attnserve.service.bundle import MODEL_FILE, TOKENIZER_FILE, BundleManifest, softmax

DEFAULT_CASCADE_MAX_DROP = DEFAULT_MAX_DROP / 2  # half a point against the teacher
FloatArray = npt.NDArray[np.float32]  # as the server computes them: thresholds compare alike


@dataclass(frozen=True)
class Choice:
    """A threshold and what it gives on some rows."""

    threshold: float
    student_accuracy: float
    teacher_accuracy: float
    cascade_accuracy: float
    student_share: float


def choose_threshold(
    student_top: FloatArray,
    student_right: npt.NDArray[np.bool_],
    teacher_right: npt.NDArray[np.bool_],
    max_drop: float,
) -> Choice:
    """The threshold giving the largest student share with cascade accuracy >= teacher's - max_drop."""
    count = len(student_top)
    if count == 0 or len(student_right) != count or len(teacher_right) != count:
        raise ExportError("the cascade threshold needs the same held-out rows from both members")
    if not (np.isfinite(max_drop) and max_drop >= 0):
        raise ExportRequestError(f"--max-drop must be a finite fraction >= 0, got {max_drop}")
    teacher_accuracy = float(teacher_right.mean())
    # Above the largest confidence no text stays with the student: the teacher alone, always allowed.
    above = float(np.nextafter(student_top.max(), np.float32(2)))
    candidates = [*sorted({float(c) for c in student_top}), above]
    for threshold in candidates:  # ascending: the first that holds keeps the most texts
        choice = measure_at(threshold, student_top, student_right, teacher_right)
        # float noise must not refuse an equal pair
        if choice.cascade_accuracy >= teacher_accuracy - max_drop - 1e-12:
            return choice
    raise ExportError("no cascade threshold holds, not even sending every text to the teacher")


def measure_at(
    threshold: float,
    student_top: FloatArray,
    student_right: npt.NDArray[np.bool_],
    teacher_right: npt.NDArray[np.bool_],
) -> Choice:
    """What ``threshold`` gives on rows: each member's accuracy, the cascade's, the student's share."""
    kept = student_top >= threshold
    return Choice(
        threshold=threshold,
        student_accuracy=float(student_right.mean()),
        teacher_accuracy=float(teacher_right.mean()),
        cascade_accuracy=float(np.where(kept, student_right, teacher_right).mean()),
        student_share=float(kept.mean()),
    )


def member_probabilities(
    bundle_dir: Path, manifest: BundleManifest, texts: list[str], graph: str | None = None
) -> FloatArray:
    """[N, C] probabilities of a member bundle's ``graph`` at its calibrated temperature, with its
    own tokenizer, max_len and side. ``graph`` None: the label graph where it has one, since
    that graph answers the label calls a cascade serves; else model.onnx."""
    if graph is None:
        graph = manifest.label_graph.file if manifest.label_graph is not None else MODEL_FILE
    session = cpu_session(bundle_dir / graph)
    logits = graph_logits(session, bundle_dir / TOKENIZER_FILE, texts, manifest.max_len, manifest.truncation)
    calibration = manifest.calibration
    return softmax(logits, calibration.temperature if calibration is not None else 1.0)
