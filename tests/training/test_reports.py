"""Metrics over the classes that occur, per-class reports, MAE, and the post-training warnings."""

from __future__ import annotations

import numpy as np
import pytest

from attnserve.training.report.metrics import class_report, confusion_matrix, macro_f1, score
from attnserve.training.report.model_checks import prediction_warnings


def _onehot(preds: list[int], classes: int, confidence: float = 0.9) -> np.ndarray:
    probs = np.full((len(preds), classes), (1 - confidence) / (classes - 1))
    probs[np.arange(len(preds)), preds] = confidence
    return probs


def test_macro_f1_averages_over_the_classes_that_occur_only() -> None:
    # Six class ids but only 1, 3 and 5 occur (stars read as ids): a perfect model scores 1.0,
    # and an always-"5" model scores 1/3 of one F1, not a mean padded by three absent classes.
    labels = np.array([1, 3, 5, 1, 3, 5])
    assert macro_f1(labels, labels.copy(), 6) == pytest.approx(1.0)
    always_five = np.full(6, 5)
    f1_five = 2 * 2 / (2 * 2 + 4 + 0)  # tp 2, fp 4, fn 0
    assert macro_f1(labels, always_five, 6) == pytest.approx(f1_five / 3)
    # A predicted class that never occurs counts (F1 0): it is a real mistake.
    assert macro_f1(np.array([0, 0]), np.array([0, 1]), 3) == pytest.approx((2 / 3 + 0.0) / 2)


def test_class_report_counts_and_confusion() -> None:
    labels = np.array([0, 0, 0, 1, 1, 2])
    preds = [0, 0, 1, 1, 1, 0]
    report = class_report(labels, _onehot(preds, 3), ("a", "b", "c"))
    assert report["confusion"] == [[2, 1, 0], [0, 2, 0], [1, 0, 0]]
    assert confusion_matrix(labels, np.array(preds), 3).sum() == 6
    a, b, c = (report["per_class"][k] for k in "abc")
    assert (a["precision"], a["recall"], a["support"], a["predicted"]) == (pytest.approx(2 / 3), 2 / 3, 3, 3)
    assert (b["precision"], b["recall"], b["f1"]) == (pytest.approx(2 / 3), 1.0, pytest.approx(0.8))
    assert (c["f1"], c["support"], c["predicted"]) == (0.0, 1, 0)
    assert report["accuracy"] == pytest.approx(4 / 6)
    assert report["classes_predicted"] == 2 and "mae" not in report


def test_ordered_labels_report_mean_absolute_error_in_label_units() -> None:
    # Stars 1/3/5 as three classes: predicting 5 for a 1 is 4 stars off, not 2 classes off.
    names = ("1", "3", "5")
    labels = np.array([0, 1, 2, 0])
    report = class_report(labels, _onehot([2, 1, 2, 0], 3), names, ordered=True)
    assert report["mae"] == pytest.approx(4 / 4) and report["mae_unit"] == "label value"
    ranked = class_report(labels, _onehot([2, 1, 2, 0], 3), ("low", "mid", "high"), ordered=True)
    assert ranked["mae"] == pytest.approx(2 / 4) and ranked["mae_unit"] == "class rank"


def test_one_class_and_calibration_warnings() -> None:
    labels = np.array([0] * 95 + [1] * 5)
    probs = _onehot([0] * 100, 2, confidence=0.95)
    report = class_report(labels, probs, ("negative", "positive"))
    scores = score(labels, probs, 0.2).as_dict()
    warnings = prediction_warnings("val", report, scores)
    assert any("predicts 'negative' for every val text" in w and "macro-F1 0.487" in w for w in warnings)

    # Right on every text but barely above chance: the probabilities mislead.
    unsure = _onehot([0] * 50 + [1] * 50, 2, confidence=0.55)
    balanced = np.array([0] * 50 + [1] * 50)
    scores = score(balanced, unsure, 0.6).as_dict()
    warnings = prediction_warnings("val", class_report(balanced, unsure, ("a", "b")), scores)
    assert len(warnings) == 1 and "poorly calibrated" in warnings[0] and "underconfident" in warnings[0]

    confident = _onehot([0] * 50 + [1] * 50, 2, confidence=0.99)
    scores = score(balanced, confident, 0.01).as_dict()
    assert prediction_warnings("val", class_report(balanced, confident, ("a", "b")), scores) == []
