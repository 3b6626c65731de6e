"""Exporting a --multi-label run: sigmoids at thresholds chosen on its validation split, an int8
gate on micro-F1, and the refusals of the steps that mean a softmax (calibration, cascades)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from attnserve.export.calibrate import CalibrateRequest, calibrate_bundle, measure_bundle
from attnserve.export.calibration import CalibrationError, RowsName, calibrate_graph
from attnserve.export.cascade import CascadeRequest, export_cascade
from attnserve.export.cascade_members import check_scoring, declared_scoring
from attnserve.export.cli import main as export_main
from attnserve.export.errors import ExportError, ExportRequestError
from attnserve.export.evalset import EvalSet, read_eval_set
from attnserve.export.golden import pick_texts
from attnserve.export.parity import cpu_session, torch_threads
from attnserve.export.quantize import MicroF1
from attnserve.export.writer import export_run
from attnserve.service.bundle import Problem, Scoring, Thresholds, read_bundle, sha256_file
from attnserve.training.loop.trainer import TrainConfig
from attnserve.training.run.checkpoint import EVAL_SET, load_run
from attnserve.training.run.pipeline import DataSpec, train_run
from attnserve.training.text.tokenizer import encode_batch, load_tokenizer
from tests.training.test_multi_label import write_topics

LABELS = ["politics", "sports", "tech"]


@pytest.fixture(scope="module")
def multi_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny mean_pool run on topic texts (the words decide the labels), a few seconds: a mean
    of word vectors adds the labels of every word, where one attention pool would pick a word."""
    root = tmp_path_factory.mktemp("multi-label")
    with torch_threads(1):
        result = train_run(
            root / "run",
            "mean_pool",
            {"d_model": 16},
            TrainConfig(
                epochs=12, batch_size=16, lr=0.03, progress=False, seed=0, threads=1, select_by="micro_f1"
            ),
            DataSpec(path=str(write_topics(root / "topics.csv", 200)), multi_label=True, seed=0),
        )
    return result.run_dir


@pytest.fixture(scope="module")
def multi_bundle(multi_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_run(multi_run, tmp_path_factory.mktemp("repository"), "topics")


def test_the_bundle_serves_sigmoids_at_thresholds_chosen_on_the_validation_split(
    multi_run: Path, multi_bundle: Path
) -> None:
    manifest = read_bundle(multi_bundle).manifest
    scoring = manifest.scoring
    assert scoring is not None and scoring.problem == Problem.MULTI_LABEL and manifest.labels == LABELS
    assert scoring.thresholds is not None and len(scoring.thresholds) == 3
    rows = len((multi_run / EVAL_SET).read_text(encoding="utf-8").splitlines())
    eval_sha = sha256_file(multi_run / EVAL_SET)
    assert scoring.chosen == Thresholds(method="f1 per label", file=EVAL_SET, rows=rows, sha256=eval_sha)
    # Temperature scaling and the drift profile describe a softmax: a multi-label bundle has neither.
    assert manifest.calibration is None and manifest.data_profile is None
    assert manifest.training_metrics["multi_label"] is True
    # onnxruntime's logits through the served scoring are PyTorch's sigmoids.
    run = load_run(multi_run)
    texts = ["vote goal today", "the story about people", "code chip law", "team match"]
    encoded = encode_batch(load_tokenizer(run.tokenizer_path), texts, run.max_len, "head")
    (logits,) = cpu_session(multi_bundle / "model.onnx").run(
        ["logits"], {"input_ids": encoded.input_ids, "attention_mask": encoded.attention_mask}
    )
    served = manifest.scores.probabilities(logits)
    with torch.no_grad():
        expected = torch.sigmoid(
            run.model.logits(torch.from_numpy(encoded.input_ids), torch.from_numpy(encoded.attention_mask))
        ).numpy()
    np.testing.assert_allclose(served, expected, atol=1e-5)
    assigned = manifest.scores.assigned(served)
    assert assigned is not None and assigned[0].tolist() == [True, True, False]  # vote, goal


def test_int8_is_gated_on_micro_f1_of_the_test_split(multi_run: Path, tmp_path: Path) -> None:
    exported = export_run(multi_run, tmp_path / "models", "topics", quantize="int8", max_accuracy_drop=1.0)
    manifest = read_bundle(exported).manifest
    quantization, scoring = manifest.quantization, manifest.scoring
    assert quantization is not None and scoring is not None and quantization.rows is not None
    assert quantization.metric == MicroF1(scoring).name and "micro-F1" in quantization.metric
    assert quantization.rows.file == "test.jsonl" and 0.8 < quantization.before <= 1.0


def test_calibration_refuses_a_multi_label_bundle_and_its_rows(
    multi_bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"text": "vote", "label": 0}) + "\n", encoding="utf-8")
    refusal = r"multi_label_classification bundle \(a sigmoid per label.*nothing to calibrate"
    with pytest.raises(ExportRequestError, match=refusal):
        calibrate_bundle(CalibrateRequest(bundle=multi_bundle, rows=rows, repository=tmp_path / "models"))
    with pytest.raises(ExportRequestError, match=refusal):
        measure_bundle(multi_bundle, rows)
    assert export_main(["calibrate", str(multi_bundle), "--rows", str(rows), "--measure"]) == 2
    assert "nothing to calibrate" in capsys.readouterr().err
    labelled = EvalSet(["vote", "goal"], np.array([[1, 0, 0], [0, 1, 0]], dtype=np.int64))
    named = RowsName("rows.jsonl", "rows", "0" * 64)
    session = cpu_session(multi_bundle / "model.onnx")
    with pytest.raises(CalibrationError, match="not a sigmoid per label"):
        calibrate_graph(session, multi_bundle / "tokenizer.json", labelled, named, 8, "head")


def test_a_cascade_refuses_members_that_are_not_single_label(
    multi_run: Path, multi_bundle: Path, tmp_path: Path
) -> None:
    for student, teacher in ((multi_run, multi_run), (multi_bundle, multi_run)):
        request = CascadeRequest(student=student, teacher=teacher, repository=tmp_path / "models", name="c")
        with pytest.raises(ExportRequestError, match=r"the student is a multi_label_classification model"):
            export_cascade(request)
    assert not (tmp_path / "models" / "c").exists()  # refused before any member was exported
    assert declared_scoring(multi_run) == Scoring.multi_label(3)
    assert declared_scoring(multi_bundle) == read_bundle(multi_bundle).manifest.scoring
    with pytest.raises(ExportRequestError, match="the teacher a multi_label_classification one"):
        check_scoring(Scoring(), Scoring.multi_label(3))
    check_scoring(Scoring(), None)  # a member that declares nothing is checked once it is placed


def test_validation_rows_with_label_sets_read_as_a_matrix(tmp_path: Path) -> None:
    path = tmp_path / EVAL_SET
    lines = [
        {"text": "the news", "labels": []},
        {"text": "goal vote", "labels": [1, 0]},
        {"text": "chip", "labels": [2]},
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in lines), encoding="utf-8")
    rows = read_eval_set(path, 3)
    assert rows.multi_label and rows.labels.tolist() == [[0, 0, 0], [1, 1, 0], [0, 0, 1]]
    assert pick_texts(rows, 3) == ["goal vote", "chip", "the news"]  # the first text of each label first
    path.write_text(json.dumps({"text": "a", "labels": [3]}) + "\n", encoding="utf-8")
    with pytest.raises(ExportError, match=r"a list of them"):
        read_eval_set(path, 3)
    mixed = [{"text": "a", "labels": [0]}, {"text": "b", "label": 1}]
    path.write_text("".join(json.dumps(row) + "\n" for row in mixed), encoding="utf-8")
    with pytest.raises(ExportError, match="rows with 'label' and rows with 'labels' in one file"):
        read_eval_set(path, 3)
