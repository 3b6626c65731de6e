"""``attnserve-export cascade``: a student and a teacher published as one model version.

Each member is a training run (exported with the default options) or a bundle folder
(verified, then copied). Both are put in ``student/`` and ``teacher/`` of a staging folder,
renamed ``<name>.student`` / ``<name>.teacher`` at the cascade's version so their metric
series never mix with another served model's; the threshold is chosen on held-out rows
(cascade_threshold.py); ``bundle.json`` (a CascadeManifest) records it with the figures and
golden cases, and the folder is renamed to the next version in one step, as writer.py does.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnserve.export.cascade_threshold import (
    DEFAULT_CASCADE_MAX_DROP,
    Choice,
    choose_threshold,
    held_out_rows,
    member_probabilities,
)
from attnserve.export.errors import ExportRequestError
from attnserve.export.golden import verify_golden
from attnserve.export.parity import cpu_session
from attnserve.export.writer import check_name, export_run, publish, staged
from attnserve.service.bundle import (
    MANIFEST_FILE,
    BundleError,
    BundleManifest,
    check_io,
    read_bundle,
    sha256_file,
    write_manifest,
)
from attnserve.service.bundle.cascade import (
    MEMBERS,
    CascadeFigures,
    CascadeGolden,
    CascadeManifest,
    Member,
    read_cascade,
    write_cascade_manifest,
)
from attnserve.training.run.checkpoint import TEST_SET

log = logging.getLogger(__name__)
GOLDEN_PER_MEMBER = 2  # texts each member answers in the cascade's own golden cases


@dataclass(frozen=True)
class CascadeRequest:
    student: Path
    teacher: Path
    repository: Path
    name: str
    max_drop: float = DEFAULT_CASCADE_MAX_DROP
    rows: Path | None = None  # held-out JSONL when neither member is a run with a test split


def export_cascade(request: CascadeRequest) -> Path:
    """Build, prove and publish the cascade as ``repository/name/N``; return that folder."""
    name = request.name
    check_name(name)
    if not (np.isfinite(request.max_drop) and request.max_drop >= 0):
        raise ExportRequestError(f"--max-drop must be a finite fraction >= 0, got {request.max_drop}")
    # Refused before the slow member exports, from what each member declares.
    _check_labels(_declared_labels(request.student), _declared_labels(request.teacher))
    runs = [path for path in (request.student, request.teacher) if _is_run(path)]
    if request.rows is None and not any((run / TEST_SET).is_file() for run in runs):
        held_out_rows(runs, None, 2)  # raises, naming --rows
    model_dir = request.repository / name
    with staged(model_dir) as bundle_dir:
        staging = bundle_dir.parent
        sources = {"student": request.student, "teacher": request.teacher}
        for member in MEMBERS:
            _place_member(sources[member], bundle_dir / member, staging / f"scratch-{member}", member)
        manifests = {member: read_bundle(bundle_dir / member).manifest for member in MEMBERS}
        labels = manifests["student"].labels
        _check_labels(labels, manifests["teacher"].labels)
        rows, named = held_out_rows(runs, request.rows, len(labels))
        student = member_probabilities(bundle_dir / "student", manifests["student"], rows.texts)
        teacher = member_probabilities(bundle_dir / "teacher", manifests["teacher"], rows.texts)
        choice = choose_threshold(
            student.max(axis=1),
            student.argmax(axis=1) == rows.labels,
            teacher.argmax(axis=1) == rows.labels,
            request.max_drop,
        )
        log.info(
            "threshold %.6f: the student answers %.1f%% of %d rows",
            choice.threshold,
            100 * choice.student_share,
            len(rows),
        )
        golden = _golden(rows.texts, student, teacher, choice, labels)
        figures = CascadeFigures(
            rows=named,
            student_accuracy=choice.student_accuracy,
            teacher_accuracy=choice.teacher_accuracy,
            cascade_accuracy=choice.cascade_accuracy,
            student_share=choice.student_share,
            max_drop=request.max_drop,
        )

        def finish(number: int) -> None:
            shas = {m: _rename_member(bundle_dir / m, f"{name}.{m}", number) for m in MEMBERS}
            manifest = CascadeManifest(
                name=name,
                version=number,
                labels=list(labels),
                threshold=choice.threshold,
                figures=figures,
                members={member: member for member in MEMBERS},
                member_sha256=shas,
                golden=golden,
            )
            write_cascade_manifest(bundle_dir, manifest)
            read_cascade(bundle_dir, expect_name=name, expect_version=number)

        return publish(model_dir, bundle_dir, None, finish)


def _check_labels(student: list[str] | None, teacher: list[str] | None) -> None:
    if student is not None and teacher is not None and student != teacher:
        raise ExportRequestError(
            f"the student's labels {student} and the teacher's {teacher} differ; "
            "a cascade needs the same labels in the same order"
        )


def _declared_labels(path: Path) -> list[str] | None:
    """The labels a bundle's bundle.json or a run's metrics.json lists; None when unreadable."""
    for file in (MANIFEST_FILE, "metrics.json"):
        try:
            labels = json.loads((path / file).read_text(encoding="utf-8")).get("labels")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(labels, list) and all(isinstance(label, str) for label in labels):
            return labels
    return None


def _is_run(path: Path) -> bool:
    return (path / "checkpoint.pt").is_file()


def _place_member(source: Path, target: Path, scratch: Path, member: Member) -> None:
    """A run exported with the default options, or a bundle folder verified then copied."""
    if _is_run(source):
        exported = export_run(source, scratch, member)
        shutil.copytree(exported, target)
        return
    if not (source / MANIFEST_FILE).is_file():
        raise ExportRequestError(f"the {member} {source} is neither a training run nor a bundle folder")
    try:
        _verify(source)
    except BundleError as exc:
        raise ExportRequestError(f"the {member} bundle {source} does not verify: {exc}") from None
    shutil.copytree(source, target)


def _verify(directory: Path) -> BundleManifest:
    """Files, sha256, declared I/O and golden outputs, as the service will check them."""
    bundle = read_bundle(directory)
    session = cpu_session(bundle.model_path)
    check_io(bundle.manifest, session)
    read = bundle.manifest
    verify_golden(session, read.golden, bundle.tokenizer_path, read.max_len, read.truncation)
    return read


def _rename_member(directory: Path, name: str, version: int) -> str:
    """Give a member the cascade's version under its own name; bundle.json's sha256 after."""
    manifest = read_bundle(directory).manifest.model_copy(update={"name": name, "version": version})
    write_manifest(directory, BundleManifest.model_validate(manifest.model_dump()))
    _verify(directory)
    return sha256_file(directory / MANIFEST_FILE)


def _golden(
    texts: list[str], student: np.ndarray, teacher: np.ndarray, choice: Choice, labels: list[str]
) -> list[CascadeGolden]:
    """A few texts each member answers, away from the threshold and with a clear label from the
    member that answers, so that neither int8's batch-dependent rounding nor a batch of one
    at load can move them."""
    top = student.max(axis=1)
    margin = np.abs(top - choice.threshold)
    cases: list[CascadeGolden] = []
    sides: tuple[tuple[Member, np.ndarray], ...] = (
        ("student", top >= choice.threshold),
        ("teacher", top < choice.threshold),
    )
    for member, chosen in sides:
        source = student if member == "student" else teacher
        # The nearer edge of each row: the threshold, or the answering member's label boundary.
        ranked = np.sort(source, axis=1)
        safety = np.minimum(margin, ranked[:, -1] - ranked[:, -2])
        picked = [int(i) for i in np.argsort(-safety) if chosen[i] and safety[i] > 1e-4][:GOLDEN_PER_MEMBER]
        for i in picked:
            label = labels[int(source[i].argmax())]
            cases.append(CascadeGolden(text=texts[i], label=label, answered_by=member))
    return cases
