"""`attnserve-export cascade`: two trained runs published as one version, and what it refuses."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from attnserve.export.cascade_rows import split_rows
from attnserve.export.cascade_threshold import choose_threshold, measure_at, member_probabilities
from attnserve.export.cli import main
from attnserve.export.errors import ExportRequestError
from attnserve.export.evalset import read_gate_rows
from attnserve.service.bundle import MANIFEST_FILE, read_bundle
from attnserve.service.bundle.cascade import is_cascade, read_cascade
from tests.support.cascades import export_duo


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
    assert manifest.decided_on == "model.onnx"
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


def test_split_depends_on_the_texts_alone_and_keeps_a_repeated_text_on_one_side() -> None:
    texts = [f"text {i}" for i in range(40)] + ["text 3", "text 3"]
    choosing, reporting = split_rows(texts)
    assert sorted([*choosing, *reporting]) == list(range(len(texts)))
    chose, reported = {texts[i] for i in choosing}, {texts[i] for i in reporting}
    assert not chose & reported and abs(len(chose) - len(reported)) <= 1
    again, _ = split_rows(list(reversed(texts)))  # any order: the same texts choose
    assert {list(reversed(texts))[i] for i in again} == chose
    with pytest.raises(ExportRequestError, match="two distinct texts"):
        split_rows(["same", "same"])


def test_the_held_out_figures_are_measured_on_rows_the_threshold_never_saw(
    trained_run: Callable[[str], Path], tmp_path: Path
) -> None:
    version = export_duo(trained_run, tmp_path, max_drop=0.0)
    manifest = read_cascade(version).manifest
    figures, split = manifest.figures, manifest.figures.split
    assert split is not None and split.rule == "sha256-alternate"
    rows, named = read_gate_rows(trained_run("gru_attention"), len(manifest.labels), None)
    assert (figures.rows.sha256, figures.rows.rows) == (named.sha256, len(rows))
    choosing, reporting = split_rows(rows.texts)
    assert (split.choosing_rows, split.reporting_rows) == (len(choosing), len(reporting))
    assert not {rows.texts[i] for i in choosing} & {rows.texts[i] for i in reporting}
    # Recomputed from the members as published: the student's calibrated model.onnx probabilities
    # choose on one part; the recorded figures are those of the other part alone.
    members = {m: read_bundle(version / m).manifest for m in ("student", "teacher")}
    student = member_probabilities(version / "student", members["student"], rows.texts, "model.onnx")
    teacher = member_probabilities(version / "teacher", members["teacher"], rows.texts)
    top, labels = student.max(axis=1), rows.labels
    s_right, t_right = student.argmax(axis=1) == labels, teacher.argmax(axis=1) == labels
    chosen = choose_threshold(top[choosing], s_right[choosing], t_right[choosing], 0.0)
    assert manifest.threshold == chosen.threshold
    reported = measure_at(chosen.threshold, top[reporting], s_right[reporting], t_right[reporting])
    assert figures.student_accuracy == reported.student_accuracy
    assert figures.teacher_accuracy == reported.teacher_accuracy
    assert figures.cascade_accuracy == reported.cascade_accuracy
    assert figures.student_share == reported.student_share


def test_a_member_without_a_temperature_gets_one_on_the_choosing_rows(
    exported_bundle: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 160 rows the student gets right and wrong (its own answer, every fifth flipped).
    student, teacher = exported_bundle("transformer"), exported_bundle("gru_attention")
    manifest = read_bundle(student).manifest
    assert manifest.calibration is None  # 12 validation rows fit none at export
    words = ["hello", "pizza", "good", "morning", "cheese", "bread", "hi", "there", "soup", "evening"]
    texts = [f"{a} {b} {c}" for a in words for b in words for c in ("now", "later")][:160]
    probabilities = member_probabilities(student, manifest, texts, "model.onnx")
    labels = probabilities.argmax(axis=1)
    labels[::5] = 1 - labels[::5]
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        "".join(json.dumps({"text": t, "label": int(y)}) + "\n" for t, y in zip(texts, labels, strict=True))
    )
    argv = ["cascade", "--student", str(student), "--teacher", str(teacher), "--rows", str(rows)]
    assert main([*argv, "--repository", str(tmp_path / "models"), "--name", "duo"]) == 0, (
        capsys.readouterr().err
    )
    version = tmp_path / "models" / "duo" / "1"
    cascade = read_cascade(version).manifest
    assert cascade.figures.rows.split == "rows" and cascade.figures.split is not None
    calibration = read_bundle(version / "student").manifest.calibration
    assert calibration is not None
    assert calibration.split == "rows, the cascade's choosing part"
    assert calibration.rows == cascade.figures.split.choosing_rows
    assert json.loads((student / MANIFEST_FILE).read_text()).get("calibration") is None  # the source kept
