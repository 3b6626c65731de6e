"""Cascade versions for the serving tests: two small runs trained in the test, exported as one."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

from attnserve.export.cascade import CascadeRequest, export_cascade

NAME = "duo"
STUDENT_FAMILY = "gru_attention"
TEACHER_FAMILY = "transformer"


def export_duo(trained_run: Callable[[str], Path], repository: Path, max_drop: float = 0.01) -> Path:
    """A cascade of the suite's tiny gru_attention (student) and transformer (teacher) runs."""
    request = CascadeRequest(
        student=trained_run(STUDENT_FAMILY),
        teacher=trained_run(TEACHER_FAMILY),
        repository=repository,
        name=NAME,
        max_drop=max_drop,
    )
    return export_cascade(request)


def serve_alone(version_dir: Path, repository: Path, member: str) -> str:
    """A cascade's member as a model of its own (its own name and version); its name."""
    manifest = json.loads((version_dir / member / "bundle.json").read_text())
    name, version = manifest["name"], manifest["version"]
    shutil.copytree(version_dir / member, repository / name / str(version))
    return str(name)


def set_threshold(version_dir: Path, threshold: float) -> None:
    """Move the threshold (the golden cases, chosen for the old one, go with it)."""
    path = version_dir / "bundle.json"
    manifest = json.loads(path.read_text())
    manifest["threshold"] = threshold
    manifest["golden"] = []
    path.write_text(json.dumps(manifest))
