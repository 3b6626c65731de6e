"""Warnings about a trained model that its accuracy alone would hide.

- one class only: on imbalanced data a model that always answers the majority class can
  score a high accuracy;
- poor calibration: served probabilities that are far from how often the model is right
  (a small data set trained too briefly gave accuracy 1.0 with probabilities of 0.36-0.52).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from attnserve.training.report.fit_diagnosis import advice

WARN_ECE = 0.15
WARN_CONFIDENCE_GAP = 0.15
MIN_ROWS = 20  # below this, calibration figures are noise


def prediction_warnings(
    split: str,
    report: dict[str, Any],
    scores: dict[str, float],
    history: Sequence[dict[str, Any]] = (),
) -> list[str]:
    """Warnings for one evaluated split, given its class report, scores and the epoch history
    (whose loss curves decide the advice: an overfit model is not told to train longer)."""
    warnings = []
    occurring = [name for name, row in report["per_class"].items() if row["support"] > 0]
    predicted = [name for name, row in report["per_class"].items() if row["predicted"] > 0]
    if len(predicted) == 1 and len(occurring) > 1:
        warnings.append(
            f"the model predicts {predicted[0]!r} for every {split} text (accuracy {report['accuracy']:.3f}, "
            f"macro-F1 {report['macro_f1']:.3f}): try --class-weights balanced, more steps (--min-steps), "
            "or check the labels"
        )
    if report["n"] >= MIN_ROWS:
        gap = scores["mean_confidence"] - scores["accuracy"]
        if scores["ece"] > WARN_ECE or abs(gap) > WARN_CONFIDENCE_GAP:
            direction = "under" if gap < 0 else "over"
            warnings.append(
                f"{split} probabilities are poorly calibrated: ECE {scores['ece']:.3f}, mean top probability "
                f"{scores['mean_confidence']:.3f} vs accuracy {scores['accuracy']:.3f} "
                f"({direction}confident); served probabilities will mislead: {advice(history)}"
            )
    return warnings
