"""`attnserve-export cascade`: two trained runs published as one version, and what it refuses."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from attnserve.export.cascade_threshold import choose_threshold
from attnserve.export.cli import main
from attnserve.service.bundle import read_bundle
from attnserve.service.bundle.cascade import is_cascade, read_cascade


def test_choose_threshold_keeps_the_most_texts_within_the_drop() -> None:
    top = np.asarray([0.55, 0.6, 0.7, 0.9, 0.95], dtype=np.float32)
    student_right = np.asarray([False, True, False, True, True])
    teacher_right = np.asarray([True, True, True, True, False])
    # Teacher 0.8. At 0.6 the student answers four texts (T F T T) and the teacher one (T): 0.8;
    # at 0.55 the student answers all five: 0.6. So 0.6 is the lowest threshold that holds.
    choice = choose_threshold(top, student_right, teacher_right, max_drop=0.0)
    assert choice.threshold == pytest.approx(0.6)
    assert choice.student_share == pytest.approx(0.8)
    assert choice.cascade_accuracy == pytest.approx(0.8)
    assert choice.teacher_accuracy == pytest.approx(0.8)
    # Allowing 0.2 points lets the student answer every text (0.6 >= 0.8 - 0.2).
    loose = choose_threshold(top, student_right, teacher_right, max_drop=0.2)
    assert loose.threshold == pytest.approx(0.55)
    assert loose.student_share == 1.0


def test_choose_threshold_can_send_every_text_to_the_teacher() -> None:
    top = np.asarray([0.9, 0.8], dtype=np.float32)
    choice = choose_threshold(top, np.asarray([False, False]), np.asarray([True, True]), max_drop=0.0)
    assert choice.threshold > 0.9
    assert choice.student_share == 0.0
    assert choice.cascade_accuracy == 1.0


def test_cascade_of_two_runs(
    trained_run: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    student, teacher = trained_run("gru_attention"), trained_run("transformer")
    argv = ["cascade", "--student", str(student), "--teacher", str(teacher)]
    rc = main([*argv, "--repository", str(tmp_path), "--name", "duo", "--max-drop", "0.01"])
    assert rc == 0, capsys.readouterr().err
    assert "cascade accuracy" in capsys.readouterr().out
    version = tmp_path / "duo" / "1"
    assert is_cascade(version)
    manifest = read_cascade(version, expect_name="duo", expect_version=1).manifest
    figures = manifest.figures
    assert figures.rows.file == "test.jsonl" and figures.rows.split == "test"
    assert figures.cascade_accuracy >= figures.teacher_accuracy - 0.01
    assert manifest.golden and {case.answered_by for case in manifest.golden} <= {"student", "teacher"}
    for member in ("student", "teacher"):
        bundle = read_bundle(version / member, expect_name=f"duo.{member}", expect_version=1)
        assert bundle.manifest.labels == manifest.labels
    assert not [p for p in (tmp_path / "duo").iterdir() if p.name.startswith(".staging")]


def test_labels_that_differ_are_refused(
    trained_run: Callable[[str], Path],
    exported_bundle: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    teacher = tmp_path / "teacher"
    shutil.copytree(exported_bundle("transformer"), teacher)
    raw = json.loads((teacher / "bundle.json").read_text())
    raw["labels"] = list(reversed(raw["labels"]))
    (teacher / "bundle.json").write_text(json.dumps(raw))
    argv = ["cascade", "--student", str(trained_run("gru_attention")), "--teacher", str(teacher)]
    rc = main([*argv, "--repository", str(tmp_path / "models"), "--name", "duo"])
    assert rc == 2
    assert "labels" in capsys.readouterr().err
    assert not (tmp_path / "models" / "duo").exists()  # refused before anything was made


def test_bundles_without_rows_need_rows_file(
    exported_bundle: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["cascade", "--student", str(exported_bundle("gru_attention"))]
    argv += ["--teacher", str(exported_bundle("transformer")), "--repository", str(tmp_path), "--name", "duo"]
    assert main(argv) == 2
    assert "--rows" in capsys.readouterr().err
