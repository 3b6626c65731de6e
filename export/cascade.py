"""``attnserve-export cascade``: a student and a teacher published as one model version.

Each member is a training run or a Hugging Face classifier folder (exported with the default
options) or a bundle folder (verified, then copied): a student distilled from an imported
model pairs with that bundle, or the folder itself, as its teacher. Both are put in
``student/`` and ``teacher/`` of a staging folder, renamed ``<name>.student`` /
``<name>.teacher`` at the cascade's version so their metric series never mix with another
served model's. The held-out rows are split in two
(cascade_rows.py); a member without a temperature gets one fitted on the choosing part; the
threshold is chosen on that part from the student's calibrated model.onnx probabilities
(cascade_threshold.py) and the figures are measured on the reporting part. ``bundle.json`` (a
CascadeManifest) records them with the golden cases, and the folder is renamed to the next
version in one step, as writer.py does. Both members must be single-label classifiers with the
same labels (cascade_members.py): a multi-label or regression member is refused by name.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnserve.export.calibration import RowsName, calibrate_or_warn
from attnserve.export.cascade_members import check_labels, check_scoring, declared_labels, declared_scoring
from attnserve.export.cascade_rows import SPLIT_RULE, has_rows, held_out_rows, part, split_rows
from attnserve.export.cascade_threshold import (
    DEFAULT_CASCADE_MAX_DROP,
    Choice,
    choose_threshold,
    measure_at,
    member_probabilities,
)
from attnserve.export.errors import ExportRequestError
from attnserve.export.evalset import EvalSet
from attnserve.export.parity import cpu_session
from attnserve.export.profile import measure_profile
from attnserve.export.source import is_imported
from attnserve.export.writer import check_name, export_run, publish, staged, verify_bundle
from attnserve.service.bundle import (
    MANIFEST_FILE,
    MODEL_FILE,
    TOKENIZER_FILE,
    BundleError,
    BundleManifest,
    GateRows,
    read_bundle,
    sha256_file,
    write_manifest,
)
from attnserve.service.bundle.cascade import (
    DECIDED_ON,
    MEMBERS,
    CascadeFigures,
    CascadeGolden,
    CascadeManifest,
    Member,
    RowsSplit,
    read_cascade,
    write_cascade_manifest,
)

log = logging.getLogger(__name__)
GOLDEN_PER_MEMBER = 2  # texts each member answers in the cascade's own golden cases


@dataclass(frozen=True)
class CascadeRequest:
    student: Path
    teacher: Path
    repository: Path
    name: str
    max_drop: float = DEFAULT_CASCADE_MAX_DROP
    rows: Path | None = None  # held-out rows when neither member is a run with a test split


def export_cascade(request: CascadeRequest) -> Path:
    """Build, prove and publish the cascade as ``repository/name/N``; return that folder."""
    name = request.name
    check_name(name)
    if not (np.isfinite(request.max_drop) and request.max_drop >= 0):
        raise ExportRequestError(f"--max-drop must be a finite fraction >= 0, got {request.max_drop}")
    # Refused before the slow member exports, from what each member declares.
    check_labels(declared_labels(request.student), declared_labels(request.teacher))
    check_scoring(declared_scoring(request.student), declared_scoring(request.teacher))
    runs = [path for path in (request.student, request.teacher) if _is_run(path)]
    if not has_rows(runs, request.rows):
        held_out_rows(runs, None, [])  # raises, naming --rows
    model_dir = request.repository / name
    with staged(model_dir) as bundle_dir:
        staging = bundle_dir.parent
        sources = {"student": request.student, "teacher": request.teacher}
        for member in MEMBERS:
            _place_member(sources[member], bundle_dir / member, staging / f"scratch-{member}", member)
        manifests = {member: read_bundle(bundle_dir / member).manifest for member in MEMBERS}
        labels = manifests["student"].labels
        check_labels(labels, manifests["teacher"].labels)
        check_scoring(manifests["student"].scores, manifests["teacher"].scores)
        rows, named = held_out_rows(runs, request.rows, labels)
        choosing, reporting = split_rows(rows.texts)
        # Each member calibrated before the threshold is chosen: its own temperature, else one
        # fitted on the choosing rows (written into its manifest when the members are renamed).
        fitted = {m: _fit(bundle_dir / m, manifests[m], part(rows, choosing), named) for m in MEMBERS}
        for member, update in fitted.items():
            manifests[member] = manifests[member].model_copy(update=update)
        student = member_probabilities(bundle_dir / "student", manifests["student"], rows.texts, DECIDED_ON)
        teacher = member_probabilities(bundle_dir / "teacher", manifests["teacher"], rows.texts)
        top = student.max(axis=1)
        student_right = student.argmax(axis=1) == rows.labels
        teacher_right = teacher.argmax(axis=1) == rows.labels
        choice = choose_threshold(
            top[choosing], student_right[choosing], teacher_right[choosing], request.max_drop
        )
        reported = measure_at(
            choice.threshold, top[reporting], student_right[reporting], teacher_right[reporting]
        )
        log.info(
            "threshold %.6f, chosen on %d rows; on the other %d the student answers %.1f%%, cascade "
            "accuracy %.4f (teacher %.4f)",
            choice.threshold,
            len(choosing),
            len(reporting),
            100 * reported.student_share,
            reported.cascade_accuracy,
            reported.teacher_accuracy,
        )
        golden = _golden(rows.texts, student, teacher, choice, labels)
        figures = CascadeFigures(
            rows=named,
            student_accuracy=reported.student_accuracy,
            teacher_accuracy=reported.teacher_accuracy,
            cascade_accuracy=reported.cascade_accuracy,
            student_share=reported.student_share,
            max_drop=request.max_drop,
            split=RowsSplit(rule=SPLIT_RULE, choosing_rows=len(choosing), reporting_rows=len(reporting)),
        )

        def finish(number: int) -> None:
            shas = {m: _rename_member(bundle_dir / m, f"{name}.{m}", number, fitted[m]) for m in MEMBERS}
            manifest = CascadeManifest(
                name=name,
                version=number,
                labels=list(labels),
                threshold=choice.threshold,
                decided_on=DECIDED_ON,
                figures=figures,
                members={member: member for member in MEMBERS},
                member_sha256=shas,
                golden=golden,
            )
            write_cascade_manifest(bundle_dir, manifest)
            read_cascade(bundle_dir, expect_name=name, expect_version=number)

        return publish(model_dir, bundle_dir, None, finish)


def _fit(directory: Path, manifest: BundleManifest, rows: EvalSet, named: GateRows) -> dict[str, object]:
    """The manifest update of a member that has no temperature: one fitted on the choosing rows,
    and its drift reference remeasured there at that temperature. Empty when it has one (kept)
    or when those rows place none (it answers at T = 1; calibrate_or_warn warns)."""
    if manifest.calibration is not None:
        return {}
    part_name = f"{named.split}, the cascade's choosing part"
    session, tokenizer = cpu_session(directory / MODEL_FILE), directory / TOKENIZER_FILE
    max_len, truncation = manifest.max_len, manifest.truncation
    where = RowsName(named.file, part_name, named.sha256)
    calibration = calibrate_or_warn(session, tokenizer, rows, where, max_len, truncation)
    if calibration is None:
        return {}
    update: dict[str, object] = {"calibration": calibration}
    if manifest.data_profile is not None:  # its confidences were those of T = 1
        update["data_profile"] = measure_profile(
            session,
            tokenizer,
            rows,
            manifest.labels,
            max_len,
            truncation,
            manifest.training_metrics,
            temperature=calibration.temperature,
            source=f"{named.file} ({part_name}) through model.onnx",
        )
    return update


def _is_run(path: Path) -> bool:
    return (path / "checkpoint.pt").is_file()


def _place_member(source: Path, target: Path, scratch: Path, member: Member) -> None:
    """A run or a Hugging Face folder exported with the default options, or a bundle folder
    verified then copied."""
    if _is_run(source) or is_imported(source):
        exported = export_run(source, scratch, member)
        shutil.copytree(exported, target)
        return
    if not (source / MANIFEST_FILE).is_file():
        raise ExportRequestError(
            f"the {member} {source} is neither a training run, a Hugging Face folder nor a bundle folder"
        )
    try:
        verify_bundle(source)
    except BundleError as exc:
        raise ExportRequestError(f"the {member} bundle {source} does not verify: {exc}") from None
    shutil.copytree(source, target)


def _rename_member(directory: Path, name: str, version: int, fitted: dict[str, object]) -> str:
    """Give a member the cascade's version under its own name, and the temperature fitted for
    it if any (``fitted``: _fit's update); bundle.json's sha256 after."""
    update = {**fitted, "name": name, "version": version}
    manifest = read_bundle(directory).manifest.model_copy(update=update)
    write_manifest(directory, BundleManifest.model_validate(manifest.model_dump()))
    verify_bundle(directory)
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
