"""Loading a cascade version: two ordinary members, then the cascade's own golden cases.

Each member (`student/`, `teacher/`) passes `load_model` as any version does. The cascade
is then served as a `LoadedModel` of its own name and version whose `cascade` holds the
members and the threshold; its manifest is the student's, renamed, with the cascade's labels
and with attention only where both members give it in the same shape (calls asking other
modes are refused as for any model without them).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np

from attnserve.service.bundle import (
    AttentionKind,
    Bundle,
    BundleError,
    BundleManifest,
    Problem,
    read_manifest,
    softmax,
)
from attnserve.service.bundle.cascade import CascadeManifest, Member, read_cascade
from attnserve.service.engine.metrics import Metrics
from attnserve.service.engine.models.loading import CascadeMembers, LoadedModel, LoadError, load_model
from attnserve.service.engine.models.runtime import RuntimeSession, pad_ids
from attnserve.service.engine.models.threads import member_settings
from attnserve.service.errors import InvalidArgument
from attnserve.service.settings import Settings

FAMILY = "cascade"
log = logging.getLogger(__name__)


def load_cascade(
    directory: Path,
    settings: Settings,
    metrics: Metrics,
    *,
    name: str,
    version: int,
    on_cpu_fallback: Callable[[], None] | None = None,
) -> LoadedModel:
    """Verify and load both members and check the cascade's golden cases (blocking)."""
    try:
        cascade = read_cascade(directory, expect_name=name, expect_version=version)
    except BundleError as exc:
        raise LoadError(str(exc)) from None
    loaded: list[LoadedModel] = []
    if settings.allow_spinning is None:
        # The members share the same cores: a teacher's threads spinning through its runs would
        # take the core a student's batch running beside it needs.
        settings = settings.model_copy(update={"allow_spinning": False})
    try:
        for member in ("student", "teacher"):
            folder = cascade.member_dir(member)
            try:
                own = read_manifest(folder)
            except BundleError as exc:
                raise LoadError(f"{name} v{version} {member}: {exc}") from None
            loaded.append(
                load_model(
                    folder,
                    member_settings(settings, name, member, own.name),
                    metrics,
                    name=own.name,
                    version=own.version,
                    on_cpu_fallback=on_cpu_fallback,
                )
            )
        student, teacher = loaded
        manifest = cascade.manifest
        for member, model in (("student", student), ("teacher", teacher)):
            if list(model.labels) != manifest.labels:
                raise LoadError(f"{name} v{version}: the {member}'s labels are not the cascade's")
            if model.scoring.problem != Problem.SINGLE_LABEL:
                # The student's top softmax probability is what decides; other scores have none.
                raise LoadError(
                    f"{name} v{version}: the {member} is a {model.scoring.problem.value} model; "
                    "a cascade's members are single-label classifiers"
                )
        members = CascadeMembers(student, teacher, manifest.threshold, manifest)
        if manifest.decided_on is None:
            # Served as every cascade is (on the student's model.onnx, so that the text alone
            # decides), against a threshold chosen on its label graph at T = 1.
            log.warning(
                "%s v%d: the threshold was chosen before cascades recorded their graph (on the "
                "student's label graph, uncalibrated); it is applied to model.onnx's probabilities: "
                "export the cascade again for a threshold chosen on them",
                name,
                version,
            )
        _check_golden(members, name, version)
    except BaseException:
        for model in loaded:
            model.metrics.unbind()
        raise
    shown = _shown_manifest(student.manifest, teacher.manifest, manifest)
    bound = metrics.bind_model(name, version, FAMILY, student.provider, tuple(manifest.labels))
    return dataclasses.replace(
        student, bundle=Bundle(manifest=shown, root=Path(directory)), metrics=bound, cascade=members
    )


def _shown_manifest(
    student: BundleManifest, teacher: BundleManifest, cascade: CascadeManifest
) -> BundleManifest:
    """How the rest of the engine sees the cascade: the student's manifest, renamed, holding
    the attention output only when both members give the same one (the V2 contract's single
    tensor; attnserve.v1 and the JSON API take each text's map from its own member)."""
    shared = student.attention == teacher.attention
    update: dict[str, object] = {
        "name": cascade.name,
        "version": cascade.version,
        "family": FAMILY,
        "golden": [],
        "data_profile": None,
        "calibration": None,  # each member answers at its own temperature
        "created_at": cascade.created_at,
        "training_metrics": {
            "held_out": {
                "student_accuracy": cascade.figures.student_accuracy,
                "teacher_accuracy": cascade.figures.teacher_accuracy,
                "accuracy": cascade.figures.cascade_accuracy,
                "student_share": cascade.figures.student_share,
            }
        },
    }
    if not shared:
        update["attention"] = student.attention.model_copy(
            update={"kind": AttentionKind.NONE, "layers": 0, "heads": 0}
        )
        update["outputs"] = [spec for spec in student.outputs if spec.name != "attention"]
    return student.model_copy(update=update)


def answer(members: CascadeMembers, text: str) -> tuple[Member, int]:
    """The member that answers one text alone, and its label index (load-time checks)."""
    # The student decides on model.onnx's calibrated probabilities, the graph a cascade
    # manifest's `decided_on` names; the teacher answers through the graph a label call reaches.
    probabilities = _probabilities(members.student, text, members.student.runtime)
    if float(probabilities.max()) >= members.threshold:
        return "student", int(probabilities.argmax())
    teacher = members.teacher
    return "teacher", int(_probabilities(teacher, text, teacher.session_for(attention=False)).argmax())


def _probabilities(model: LoadedModel, text: str, graph: RuntimeSession) -> np.ndarray:
    ids = list(model.tokenizer.encode([text]).ids[0])
    feed, mask = pad_ids([ids], model.manifest.pad_id)
    logits = graph.run(feed, mask, False)[0][0].astype(np.float32)
    return softmax(logits, model.temperature)


def _check_golden(members: CascadeMembers, name: str, version: int) -> None:
    for number, case in enumerate(members.manifest.golden):
        where = f"{name} v{version}: cascade golden case {number} ({case.text[:40]!r})"
        try:
            member, label = answer(members, case.text)
        except InvalidArgument as exc:
            raise LoadError(f"{where}: cannot be encoded: {exc.message}") from None
        got = members.manifest.labels[label]
        if (member, got) != (case.answered_by, case.label):
            raise LoadError(f"{where}: the {member} answers {got!r}, the bundle expects the "
                            f"{case.answered_by} to answer {case.label!r}")  # fmt: skip
