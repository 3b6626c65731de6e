"""The cascade's threshold, chosen on held-out rows from both members' probabilities.

The student answers a text when its top probability is at least the threshold; the teacher
answers the rest. Among the thresholds that keep the cascade's accuracy within ``max_drop``
of the teacher's, the one that leaves the student the most texts wins: every candidate is
one of the student's own confidences (or just above the largest, sending every text on).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from attnserve.export.errors import ExportError, ExportRequestError
from attnserve.export.evalset import EvalSet, load_bundle_tokenizer, read_eval_set, read_gate_rows
from attnserve.export.parity import cpu_session, run_onnx
from attnserve.export.quantize import DEFAULT_MAX_DROP
from attnserve.service.bundle import MODEL_FILE, BundleManifest, GateRows, sha256_file
from attnserve.training.text.tokenizer import encode_batch

DEFAULT_CASCADE_MAX_DROP = DEFAULT_MAX_DROP / 2  # half a point against the teacher
ROWS_SPLIT = "rows"  # how the manifest names rows given with --rows
CHUNK = 64
FloatArray = npt.NDArray[np.float32]  # as the server computes them: thresholds compare alike


@dataclass(frozen=True)
class Choice:
    """A threshold and what it gives on the held-out rows."""

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
        kept = student_top >= threshold
        right = np.where(kept, student_right, teacher_right)
        accuracy = float(right.mean())
        if accuracy >= teacher_accuracy - max_drop - 1e-12:  # float noise must not refuse an equal pair
            return Choice(
                threshold=threshold,
                student_accuracy=float(student_right.mean()),
                teacher_accuracy=teacher_accuracy,
                cascade_accuracy=accuracy,
                student_share=float(kept.mean()),
            )
    raise ExportError("no cascade threshold holds, not even sending every text to the teacher")


def held_out_rows(runs: list[Path], rows_file: Path | None, num_classes: int) -> tuple[EvalSet, GateRows]:
    """The run's test split (the student's run first), else ``rows_file``."""
    for run_dir in runs:
        try:
            return read_gate_rows(run_dir, num_classes, None)
        except ExportRequestError:
            continue
    if rows_file is None:
        raise ExportRequestError(
            "the cascade threshold is chosen on held-out rows: neither member is a run with a test "
            "split (test.jsonl), so give --rows FILE (JSONL with text and label)"
        )
    try:
        rows = read_eval_set(rows_file, num_classes)
    except ExportError as exc:
        raise ExportRequestError(f"--rows {rows_file}: {exc}") from None
    named = GateRows(file=rows_file.name, split=ROWS_SPLIT, rows=len(rows), sha256=sha256_file(rows_file))
    return rows, named


def softmax(logits: npt.NDArray[np.float32]) -> FloatArray:
    """Float32, as the server's runner computes it, so a text's confidence is the served one."""
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return np.asarray(shifted / shifted.sum(axis=-1, keepdims=True), dtype=np.float32)


def member_probabilities(bundle_dir: Path, manifest: BundleManifest, texts: list[str]) -> FloatArray:
    """[N, C] probabilities of a member bundle's graph, its own tokenizer, max_len and side: the
    label graph where it has one, since that graph answers the label calls a cascade serves."""
    graph = manifest.label_graph.file if manifest.label_graph is not None else MODEL_FILE
    session = cpu_session(bundle_dir / graph)
    tokenizer = load_bundle_tokenizer(bundle_dir / "tokenizer.json")
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # chunks pad to their own longest
    out = np.zeros((len(texts), len(manifest.labels)), dtype=np.float32)
    for start in range(0, len(order), CHUNK):
        picked = order[start : start + CHUNK]
        encoded = encode_batch(tokenizer, [texts[i] for i in picked], manifest.max_len, manifest.truncation)
        ids, mask = encoded.input_ids, encoded.attention_mask
        if ids.shape[1] == 0:  # every text normalised to nothing: one padded column keeps shapes valid
            ids = mask = np.zeros((len(picked), 1), dtype=np.int64)
        out[picked] = softmax(run_onnx(session, ids, mask).logits)
    return out
