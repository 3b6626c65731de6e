"""`attnserve-export FOLDER` on multi-label and regression classifiers (config.json's
``problem_type``): tiny random BERT and DistilBERT models exported through the command line,
their bundles' ``scoring`` read back, and the graphs' outputs through ``Scoring.probabilities``
compared with transformers' sigmoids and values. A multi-label model's thresholds, chosen on
``--rows``, are the ones ``choose_thresholds`` picks on transformers' own probabilities; the
refusals name their reason. ``choose_thresholds`` itself is checked against a brute force.
"""

from __future__ import annotations

import csv
import json
import logging
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import transformers
from hypothesis import given, settings
from hypothesis import strategies as st

from attnserve.export.errors import ExportRequestError
from attnserve.export.evalset import graph_logits
from attnserve.export.hf_import import GOLDEN_TEXTS
from attnserve.export.parity import DEFAULT_TOLERANCE, cpu_session, torch_threads
from attnserve.export.problem_rows import CHOSEN_BY_F1, read_problem_rows
from attnserve.export.thresholds import choose_thresholds, label_f1, micro_f1
from attnserve.service.bundle import (
    Problem,
    Scoring,
    Thresholds,
    label_tolerance,
    read_bundle,
    sha256_file,
    sigmoid,
)
from tests.export.hf_classifiers import ARCHITECTURES, save_classifier, texts
from tests.export.test_hf_import import ATOL, _alone, _config, _export, _reference

MULTI = "multi_label_classification"
REGRESSION = "regression"
LABELS = {MULTI: ("toxic", "funny", "off-topic"), REGRESSION: ("LABEL_0",)}
SPREAD = 40.0  # random heads score every text near 0; scaled up, sigmoids spread over (0, 1)
ROWS = 40


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    with torch_threads(1):  # tiny models: extra threads only add contention
        yield


def save_problem_classifier(arch: str, folder: Path, problem_type: str) -> Path:
    """``hf_classifiers.save_classifier``'s tiny model of ``arch`` with ``problem_type`` set."""
    spec = ARCHITECTURES[arch]
    tokenizer = spec.tokenizer_class(tokenizer_object=spec.tokenizer(), model_max_length=512)
    labels = dict(enumerate(LABELS[problem_type]))
    config = spec.config(tokenizer.backend_tokenizer.get_vocab_size(), tokenizer.pad_token_id, labels)
    config.problem_type = problem_type
    torch.manual_seed(0)
    model = transformers.AutoModelForSequenceClassification.from_config(config)
    with torch.no_grad():
        model.classifier.weight.mul_(SPREAD)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def transformers_logits(folder: Path, batch: list[str]) -> np.ndarray:
    """transformers' logits [N, C] of ``batch`` as users compute them: one padded batch."""
    tokenizer, model = _reference(folder)
    with torch.inference_mode():
        encoded = tokenizer(batch, padding=True, truncation=True, max_length=40, return_tensors="pt")
        return np.asarray(model(**encoded).logits.numpy(), dtype=np.float32)


def write_multi_label_rows(path: Path, folder: Path) -> tuple[list[str], np.ndarray]:
    """40 texts, each carrying the labels whose sigmoid is over that label's 60th percentile, a
    few flipped: the F1-best thresholds are not 0.5. Columns ``sentence`` and ``labels``."""
    batch = texts(ROWS, seed=1)
    probabilities = sigmoid(transformers_logits(folder, batch))
    targets = probabilities > np.percentile(probabilities, 60, axis=0)
    targets[np.random.default_rng(0).random(targets.shape) < 0.1] ^= True
    names = LABELS[MULTI]
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["sentence", "labels"])
        for text, row in zip(batch, targets, strict=True):
            writer.writerow([text, "|".join(name for name, on in zip(names, row, strict=True) if on)])
    return batch, targets


def write_regression_rows(path: Path) -> tuple[list[str], np.ndarray]:
    batch = texts(ROWS, seed=1)
    values = np.linspace(-1.0, 4.0, ROWS)
    lines = [
        json.dumps({"text": text, "score": float(value)}) for text, value in zip(batch, values, strict=True)
    ]
    path.write_text("".join(line + "\n" for line in lines))
    return batch, values


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@dataclass(frozen=True)
class Exported:
    arch: str
    problem: Problem
    folder: Path
    bundle: Path
    rows: Path | None
    row_texts: list[str]
    targets: np.ndarray | None
    warnings: list[str]


CASES = {  # (architecture, problem_type, with --rows)
    "bert-multi-label-rows": ("bert", MULTI, True),
    "distilbert-multi-label": ("distilbert", MULTI, False),
    "bert-regression-rows": ("bert", REGRESSION, True),
    "distilbert-regression": ("distilbert", REGRESSION, False),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def exported(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Exported:
    arch, problem_type, with_rows = CASES[request.param]
    root = tmp_path_factory.mktemp(request.param)
    folder = save_problem_classifier(arch, root / "classifier", problem_type)
    flags: list[str] = []
    rows: Path | None = None
    row_texts: list[str] = []
    targets: np.ndarray | None = None
    if with_rows and problem_type == MULTI:
        rows = root / "rows.csv"
        row_texts, targets = write_multi_label_rows(rows, folder)
        flags = ["--text-column", "sentence", "--label-column", "labels"]
    elif with_rows:
        rows = root / "rows.jsonl"
        row_texts, targets = write_regression_rows(rows)
        flags = ["--label-column", "score"]
    if rows is not None:
        # Random weights: int8 is accepted whatever it does to micro-F1; its figures are recorded.
        flags += ["--rows", str(rows), "--max-accuracy-drop", "100"]
    handler = _Warnings()
    logger = logging.getLogger("attnserve.export")
    logger.addHandler(handler)
    try:
        assert _export(folder, root / "models", "m", *flags, "--no-latency") == 0
    finally:
        logger.removeHandler(handler)
    bundle = root / "models" / "m" / "1"
    return Exported(arch, Problem(problem_type), folder, bundle, rows, row_texts, targets, handler.messages)


def test_the_manifest_declares_the_problem_and_golden_cases_are_transformers(exported: Exported) -> None:
    manifest = read_bundle(exported.bundle).manifest
    scoring = manifest.scoring
    assert scoring is not None and scoring.problem == exported.problem
    assert manifest.labels == list(LABELS[exported.problem.value])
    assert {s.name: s.shape for s in manifest.outputs}["logits"] == ["batch", len(manifest.labels)]
    if exported.problem == Problem.REGRESSION:
        assert scoring == Scoring(problem=Problem.REGRESSION)
    elif exported.rows is None:
        assert scoring == Scoring.multi_label(3) and scoring.chosen == Thresholds(method="default")
        assert scoring.thresholds == [0.5, 0.5, 0.5]
    else:
        assert scoring.chosen == Thresholds(
            method=CHOSEN_BY_F1, file="rows.csv", rows=ROWS, sha256=sha256_file(exported.rows)
        )
    assert manifest.calibration is None and manifest.data_profile is None  # softmax figures only
    assert manifest.training_metrics["source"]["problem_type"] == exported.problem.value  # type: ignore[index]
    assert manifest.parity is not None and manifest.parity.logits_max_abs_diff <= DEFAULT_TOLERANCE
    tokenizer, model = _reference(exported.folder)
    golden = [case.text for case in manifest.golden]
    if exported.rows is None:
        assert golden == list(GOLDEN_TEXTS)
    else:  # the rows' texts (a multi-label model's: the first row carrying each label, then the next)
        assert len(golden) == 4 and set(golden) <= set(exported.row_texts)
    for case in manifest.golden:
        ids = tokenizer(case.text, truncation=True, max_length=manifest.max_len)["input_ids"]
        assert case.input_ids == ids and len(case.logits) == len(manifest.labels)
        np.testing.assert_allclose(case.logits, _alone(model, ids)[0], atol=ATOL)


def test_served_scores_are_transformers_sigmoids_or_values(exported: Exported) -> None:
    bundle = read_bundle(exported.bundle)
    manifest, scoring = bundle.manifest, bundle.manifest.scores
    batch = [*texts(6, seed=2), " ".join(texts(40, seed=3))]  # the last far past max_len
    reference = transformers_logits(exported.folder, batch)
    expected = sigmoid(reference) if exported.problem == Problem.MULTI_LABEL else reference
    tokenizer = bundle.tokenizer_path
    logits = graph_logits(
        cpu_session(bundle.model_path), tokenizer, batch, manifest.max_len, manifest.truncation
    )
    np.testing.assert_allclose(scoring.probabilities(logits), expected, atol=ATOL)
    assert bundle.label_model_path is not None and manifest.label_graph is not None
    session = cpu_session(bundle.label_model_path)
    label_logits = graph_logits(session, tokenizer, batch, manifest.max_len, manifest.truncation)
    if manifest.label_graph.quantization is None:
        np.testing.assert_allclose(scoring.probabilities(label_logits), expected, atol=ATOL)
    else:
        assert np.abs(label_logits - reference).max() <= label_tolerance(manifest, DEFAULT_TOLERANCE)
    assigned = scoring.assigned(scoring.probabilities(logits))
    if exported.problem == Problem.REGRESSION:
        assert assigned is None
    else:
        assert scoring.thresholds is not None and assigned is not None
        thresholds = np.asarray(scoring.thresholds, dtype=np.float32)
        clear = np.abs(expected - thresholds) > 1e-4  # rows not on a threshold's edge
        np.testing.assert_array_equal(assigned[clear], (expected >= thresholds)[clear])


@pytest.mark.parametrize("exported", ["bert-multi-label-rows"], indirect=True)
def test_thresholds_are_chosen_on_the_rows_from_transformers_probabilities(exported: Exported) -> None:
    assert exported.rows is not None and exported.targets is not None
    manifest = read_bundle(exported.bundle).manifest
    assert manifest.scoring is not None and manifest.scoring.thresholds is not None
    probabilities = sigmoid(transformers_logits(exported.folder, exported.row_texts))
    expected = choose_thresholds(probabilities, exported.targets)
    np.testing.assert_allclose(manifest.scoring.thresholds, expected, atol=1e-6)
    assert any(abs(t - 0.5) > 1e-3 for t in expected)  # the rows moved them
    # The label graph's int8 gate scored the same rows with micro-F1 at those thresholds.
    assert manifest.label_graph is not None and manifest.label_graph.quantization is not None
    gate = manifest.label_graph.quantization
    assert gate.metric == "micro-F1 at the thresholds"
    assert gate.rows is not None and (gate.rows.file, gate.rows.rows) == ("rows.csv", ROWS)
    assert gate.rows.sha256 == sha256_file(exported.rows)
    at_thresholds = probabilities >= np.asarray(manifest.scoring.thresholds, dtype=np.float32)
    assert gate.before == pytest.approx(micro_f1(at_thresholds, exported.targets))


@pytest.mark.parametrize("exported", ["bert-regression-rows", "distilbert-regression"], indirect=True)
def test_a_regressions_graphs_stay_float32_and_the_export_says_why(exported: Exported) -> None:
    manifest = read_bundle(exported.bundle).manifest
    assert manifest.quantization is None
    assert manifest.label_graph is not None and manifest.label_graph.quantization is None
    assert any(
        message.startswith("label graph stays float32: int8 is not offered for a regression model")
        for message in exported.warnings
    ), exported.warnings


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("folders")
    return {
        MULTI: save_problem_classifier("bert", root / "multi", MULTI),
        REGRESSION: save_problem_classifier("bert", root / "regression", REGRESSION),
        "single": save_classifier(ARCHITECTURES["bert"], root / "single"),
    }


def _rows(name: str, header: tuple[str, str], *rows: tuple[str, str]) -> Callable[[Path], list[str]]:
    def write(folder: Path) -> list[str]:
        with open(folder / name, "w", newline="", encoding="utf-8") as handle:
            csv.writer(handle).writerows([header, *rows])
        return ["--rows", str(folder / name)]

    return write


def _edit(edit: Callable[[Path], None]) -> Callable[[Path], list[str]]:
    def apply(folder: Path) -> list[str]:
        edit(folder)
        return []

    return apply


REFUSALS: dict[str, tuple[str, Callable[[Path], list[str]], tuple[str, ...], str]] = {
    "regression with two outputs": (
        "single",
        _edit(_config(lambda c: c.update(problem_type="regression"))),
        (),
        "problem_type 'regression' with 2 outputs (id2label lists 2): the server serves one value per text",
    ),
    "an unknown problem_type": (
        "single",
        _edit(_config(lambda c: c.update(problem_type="ranking"))),
        (),
        "unknown problem_type 'ranking' in config.json; known: single_label_classification",
    ),
    "multi-label with one label": (
        REGRESSION,
        _edit(_config(lambda c: c.update(problem_type=MULTI))),
        (),
        "a multi_label_classification model needs two labels or more, config.json has 1",
    ),
    "an unknown label in --rows": (
        MULTI,
        _rows("rows.csv", ("text", "label"), ("good film", "funny"), ("bad plot", "toxic|spam")),
        (),
        "row 2 names the label 'spam', which is not one of ['toxic', 'funny', 'off-topic']",
    ),
    "a missing text column": (
        MULTI,
        _rows("rows.csv", ("sentence", "label"), ("good film", "funny")),
        (),
        "has no text column 'text'; it has sentence, label",
    ),
    "a missing label column": (
        REGRESSION,
        _rows("rows.csv", ("text", "value"), ("good film", "1.5")),
        (),
        "has no label column 'label'; it has text, value",
    ),
    "a regression value that is no number": (
        REGRESSION,
        _rows("rows.csv", ("text", "label"), ("good film", "1.5"), ("bad plot", "high")),
        (),
        "row 2's value 'high' is not a number",
    ),
    "int8 for a regression": (
        REGRESSION,
        _edit(lambda folder: None),
        ("--quantize", "int8"),
        "int8 is not offered for a regression model",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_refusals_name_the_reason_and_publish_nothing(
    case: str, folders: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, prepare, flags, message = REFUSALS[case]
    folder = tmp_path / "classifier"
    shutil.copytree(folders[source], folder)
    extra = prepare(folder)
    assert _export(folder, tmp_path / "models", "m", "--no-latency", *extra, *flags) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert message in err, err
    assert not (tmp_path / "models" / "m" / "1").exists()


def test_int8_of_a_multi_label_model_is_gated_on_micro_f1_at_its_thresholds(
    folders: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = tmp_path / "rows.csv"
    write_multi_label_rows(rows, folders[MULTI])
    columns = ("--text-column", "sentence", "--label-column", "labels")
    drop = ("--max-accuracy-drop", "-1")  # any figure is a drop of more than -1 point: refused
    flags = ("--rows", str(rows), *columns, "--quantize", "int8", *drop, "--no-latency")
    assert _export(folders[MULTI], tmp_path / "models", "m", *flags) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "int8 quantization refused: held-out micro-F1 at the thresholds (rows.csv)" in err, err
    assert not (tmp_path / "models" / "m" / "1").exists()


def test_multi_label_rows_read_names_separated_by_bars_or_json_lists(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    lines: list[dict[str, Any]] = [
        {"text": "a", "label": "funny|toxic"},
        {"text": "b", "label": ["off-topic"]},
        {"text": "c", "label": ""},
        {"text": "d", "label": None},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    rows = read_problem_rows(path, LABELS[MULTI], Problem.MULTI_LABEL, "text", "label")
    assert rows.texts == ["a", "b", "c", "d"]
    np.testing.assert_array_equal(rows.targets, [[1, 1, 0], [0, 0, 1], [0, 0, 0], [0, 0, 0]])
    with pytest.raises(ExportRequestError, match=re.escape("row 1's value 'funny|toxic' is not a number")):
        read_problem_rows(path, LABELS[REGRESSION], Problem.REGRESSION, "text", "label")


# choose_thresholds


def _mid(low: float, high: float) -> float:
    """The float32 middle of two float32 probabilities, as choose_thresholds computes it."""
    return float(np.float32((float(np.float32(low)) + float(np.float32(high))) / 2))


@pytest.mark.parametrize(
    ("probabilities", "targets", "expected"),
    [
        ([0.9, 0.8, 0.3, 0.2], [1, 1, 0, 0], 0.5),  # 0.5 separates them already: kept
        ([0.45, 0.4, 0.3, 0.2], [1, 1, 0, 0], _mid(0.4, 0.3)),  # the middle of the gap below 0.5
        ([0.9, 0.8, 0.7, 0.6], [1, 1, 0, 0], _mid(0.8, 0.7)),  # the middle of the gap above it
        ([0.1, 0.2], [1, 1], _mid(0.0, 0.1)),  # every row: below the lowest
        ([0.9, 0.1], [0, 0], 0.5),  # a label no row carries keeps 0.5
        ([1.0, 1.0], [0, 0], 0.5),  # nothing above 1 assigns none: every threshold scores 0
        ([0.0, 0.0], [1, 1], 0.5),  # nothing above 0 assigns a 0
        ([0.6, 0.6, 0.6], [1, 0, 1], 0.5),  # ties move together
    ],
)
def test_choose_thresholds_maximises_each_labels_f1(
    probabilities: list[float], targets: list[int], expected: float
) -> None:
    p = np.asarray(probabilities, dtype=np.float32)[:, None]
    t = np.asarray(targets, dtype=bool)[:, None]
    assert choose_thresholds(p, t) == [expected]


def test_choose_thresholds_is_per_label() -> None:
    p = np.asarray([[0.9, 0.45], [0.8, 0.4], [0.3, 0.3], [0.2, 0.2]], dtype=np.float32)
    t = np.asarray([[1, 1], [1, 1], [0, 0], [0, 0]], dtype=bool)
    assert choose_thresholds(p, t) == [0.5, _mid(0.4, 0.3)]


@pytest.mark.parametrize(
    ("probabilities", "targets", "message"),
    [
        (np.zeros((0, 2)), np.zeros((0, 2)), "at least one row"),
        (np.zeros((3, 2)), np.zeros((3, 1)), "must both be"),
        (np.full((2, 1), 1.5), np.zeros((2, 1)), "within"),
        (np.full((2, 1), np.nan), np.zeros((2, 1)), "finite"),
    ],
)
def test_choose_thresholds_refuses_what_is_not_probabilities_and_targets(
    probabilities: np.ndarray, targets: np.ndarray, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        choose_thresholds(probabilities.astype(np.float32), targets.astype(bool))


VALUES = st.sampled_from([0.0, 0.1, 0.3, 0.49999997, 0.5, 0.50000006, 0.7, 0.9, 0.99999994, 1.0])


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_choose_thresholds_is_a_best_f1_threshold_closest_to_one_half(data: st.DataObject) -> None:
    rows = data.draw(st.integers(1, 12))
    values = data.draw(st.lists(st.one_of(VALUES, st.floats(0, 1, width=32)), min_size=rows, max_size=rows))
    carried = data.draw(st.lists(st.booleans(), min_size=rows, max_size=rows))
    p, t = np.asarray(values, dtype=np.float32), np.asarray(carried, dtype=bool)
    (threshold,) = choose_thresholds(p[:, None], t[:, None])
    assert 0 < threshold < 1 and float(np.float32(threshold)) == threshold
    # Brute force: every threshold in (0, 1) assigns the rows at or over one of these.
    candidates = {0.5, *(float(v) for v in p if 0 < v < 1)}
    candidates |= {float(np.nextafter(np.float32(v), np.float32(1))) for v in p if v < np.float32(0.99999994)}
    best = max(label_f1(p, t, c) for c in candidates)
    assert label_f1(p, t, threshold) == pytest.approx(best)
    if label_f1(p, t, 0.5) == pytest.approx(best):
        assert threshold == 0.5


def test_micro_f1_counts_every_row_and_label_together() -> None:
    assigned = np.asarray([[1, 0], [1, 1], [0, 0]], dtype=bool)
    targets = np.asarray([[1, 1], [0, 1], [0, 0]], dtype=bool)
    assert micro_f1(assigned, targets) == pytest.approx(2 * 2 / (3 + 3))
    assert micro_f1(np.zeros((2, 2), dtype=bool), np.zeros((2, 2), dtype=bool)) == 1.0
