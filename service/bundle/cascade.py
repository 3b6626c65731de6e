"""A cascade version: a student that answers the texts it is sure of, a teacher for the rest.

`models/<name>/<version>/bundle.json` of kind "cascade" is a `CascadeManifest`; the folder
holds two complete ordinary bundles, `student/` and `teacher/`, each verified as any bundle
is. A text goes to the teacher when the student's top probability is under `threshold`:
softmax(logits / T) of the student's `decided_on` graph at its calibrated temperature T.
Standard library and pydantic only: part of the torch-free serving install.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from attnserve.service.bundle.manifest import (
    MANIFEST_FILE,
    BundleError,
    GateRows,
    model_name,
    sha256_file,
)

CASCADE_KIND: Literal["cascade"] = "cascade"
Member = Literal["student", "teacher"]
MEMBERS: tuple[Member, Member] = ("student", "teacher")
DecidedOn = Literal["model.onnx"]
DECIDED_ON: DecidedOn = "model.onnx"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RowsSplit(_Strict):
    """How the held-out rows were shared: the threshold chosen on one part, the figures measured
    on the other, which the choice never saw."""

    # Distinct texts ordered by the sha256 of their UTF-8 bytes; even ranks choose, odd ranks report.
    rule: Literal["sha256-alternate"]
    choosing_rows: int = Field(ge=1)
    reporting_rows: int = Field(ge=1)


class CascadeFigures(_Strict):
    """Accuracy of each member and of the cascade at the chosen threshold, and the student's
    share of the texts, on the reporting part of the held-out rows (`split`); cascades written
    before the split (`split` absent) measured them on the very rows that chose the threshold."""

    rows: GateRows  # the whole file: both parts
    student_accuracy: float = Field(ge=0, le=1)
    teacher_accuracy: float = Field(ge=0, le=1)
    cascade_accuracy: float = Field(ge=0, le=1)
    student_share: float = Field(ge=0, le=1)  # texts the student answers
    max_drop: float = Field(ge=0)  # allowed accuracy loss against the teacher, a fraction
    split: RowsSplit | None = None


class CascadeGolden(_Strict):
    """A text with the label the whole cascade answers and the member that answered it."""

    text: str
    label: str
    answered_by: Member


class CascadeManifest(_Strict):
    schema_version: Literal[1] = 1
    kind: Literal["cascade"] = CASCADE_KIND
    name: str
    version: int = Field(ge=1)
    labels: list[str] = Field(min_length=2)
    # Above 1 (just past a top probability of 1.0) sends every text to the teacher.
    threshold: float = Field(ge=0, le=2)
    # The student graph whose probabilities, at the student's calibrated temperature, the
    # threshold was chosen on: model.onnx, which every bundle has and every call can run.
    # Absent from older cascades, chosen on the label graph where the student had one, at T = 1.
    decided_on: DecidedOn | None = None
    figures: CascadeFigures
    members: dict[Member, str]  # member -> its subfolder
    member_sha256: dict[Member, str]  # member -> sha256 of its bundle.json
    golden: list[CascadeGolden] = Field(default_factory=list)
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))

    @field_validator("name")
    @classmethod
    def _name_ok(cls, value: str) -> str:
        return model_name(value)

    @field_validator("members")
    @classmethod
    def _members_ok(cls, value: dict[Member, str]) -> dict[Member, str]:
        if set(value) != set(MEMBERS):
            raise ValueError("members must name exactly a student and a teacher folder")
        for folder in value.values():
            if "/" in folder or "\\" in folder or folder in ("", ".", "..") or folder.startswith("."):
                raise ValueError(f"members: {folder!r} is not a plain subfolder name")
        return value


@dataclass(frozen=True)
class Cascade:
    """A cascade version on disk whose member manifests are the ones it recorded."""

    manifest: CascadeManifest
    root: Path

    def member_dir(self, member: Member) -> Path:
        return self.root / self.manifest.members[member]


def is_cascade(directory: Path) -> bool:
    """Whether the version folder's bundle.json declares kind "cascade" (unreadable: no)."""
    try:
        raw = json.loads((directory / MANIFEST_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(raw, dict) and raw.get("kind") == CASCADE_KIND


def read_cascade(
    directory: Path | str, *, expect_name: str | None = None, expect_version: int | None = None
) -> Cascade:
    """Read a cascade's bundle.json and check each member's bundle.json against its sha256;
    the members themselves are read and verified as ordinary bundles by their loader."""
    root = Path(directory)
    path = root / MANIFEST_FILE
    try:
        manifest = CascadeManifest.model_validate_json(path.read_bytes())
    except OSError as exc:
        raise BundleError(f"{path} cannot be read: {exc}") from None
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in err['loc']) or '(root)'}: {err['msg']}" for err in exc.errors()
        )
        raise BundleError(f"{path} is not a valid cascade manifest: {problems}") from None
    if expect_name is not None and manifest.name != expect_name:
        raise BundleError(f"{root}: manifest names model {manifest.name!r}, expected {expect_name!r}")
    if expect_version is not None and manifest.version != expect_version:
        raise BundleError(f"{root}: manifest says version {manifest.version}, folder says {expect_version}")
    cascade = Cascade(manifest, root)
    for member in MEMBERS:
        member_manifest = cascade.member_dir(member) / MANIFEST_FILE
        if not member_manifest.is_file():
            raise BundleError(f"{root}: the {member} bundle has no {MANIFEST_FILE}")
        if sha256_file(member_manifest) != manifest.member_sha256.get(member):
            raise BundleError(f"{root}: the {member}'s {MANIFEST_FILE} is not the one the cascade recorded")
    return cascade


def write_cascade_manifest(directory: Path, manifest: CascadeManifest) -> Path:
    path = directory / MANIFEST_FILE
    path.write_text(manifest.model_dump_json(indent=2) + "\n", encoding="utf-8")
    return path
