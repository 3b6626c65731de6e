"""Classification metrics computed from predicted probabilities (numpy only).

Averages over classes run over the classes that occur (in the true labels or the
predictions), as scikit-learn does: a class that never occurs says nothing about the model,
and counting it as F1 = 1 would flatter a model that ignores the classes that do occur.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Scores:
    loss: float
    accuracy: float
    macro_f1: float
    brier: float
    ece: float
    mean_confidence: float  # mean top probability: compare with accuracy
    n: int

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}

    @property
    def micro_f1(self) -> float:
        """With one label per text, micro-averaged F1 is the accuracy (--select-by micro_f1)."""
        return self.accuracy


def confusion_matrix(labels: np.ndarray, preds: np.ndarray, num_classes: int) -> np.ndarray:
    """[C, C] counts: row = true class, column = predicted class."""
    matrix = np.zeros((num_classes, num_classes), dtype=np.int64)
    np.add.at(matrix, (labels, preds), 1)
    return matrix


def _per_class(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """precision, recall, F1, support and an "occurs" mask per class, from a confusion matrix."""
    tp = np.diag(matrix).astype(np.float64)
    predicted = matrix.sum(axis=0).astype(np.float64)
    support = matrix.sum(axis=1).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = np.where(predicted > 0, tp / predicted, 0.0)
        recall = np.where(support > 0, tp / support, 0.0)
        f1 = np.where(support + predicted > 0, 2 * tp / (support + predicted), 0.0)
    return precision, recall, f1, support, (support + predicted) > 0


def macro_f1(labels: np.ndarray, preds: np.ndarray, num_classes: int) -> float:
    """Mean F1 over the classes that occur in ``labels`` or ``preds``."""
    _, _, f1, _, occurs = _per_class(confusion_matrix(labels, preds, num_classes))
    return float(f1[occurs].mean()) if occurs.any() else 0.0


def brier_score(labels: np.ndarray, probs: np.ndarray) -> float:
    onehot = np.eye(probs.shape[1], dtype=np.float64)[labels]
    return float(np.mean(np.sum((probs - onehot) ** 2, axis=1)))


def expected_calibration_error(labels: np.ndarray, probs: np.ndarray, bins: int = 10) -> float:
    conf = probs.max(axis=1)
    correct = (probs.argmax(axis=1) == labels).astype(np.float64)
    edges = np.linspace(0.0, 1.0, bins + 1)
    ece = 0.0
    for lo, hi in itertools.pairwise(edges):
        in_bin = (conf > lo) & (conf <= hi)
        if in_bin.any():
            ece += in_bin.mean() * abs(correct[in_bin].mean() - conf[in_bin].mean())
    return float(ece)


def score(labels: np.ndarray, probs: np.ndarray, loss: float) -> Scores:
    """All per-epoch metrics at once; `probs` is [N, C], `labels` is [N]."""
    if len(labels) == 0:
        raise ValueError("cannot score an empty split")
    preds = probs.argmax(axis=1)
    return Scores(
        loss=float(loss),
        accuracy=float(np.mean(preds == labels)),
        macro_f1=macro_f1(labels, preds, probs.shape[1]),
        brier=brier_score(labels, probs),
        ece=expected_calibration_error(labels, probs),
        mean_confidence=float(probs.max(axis=1).mean()),
        n=len(labels),
    )


def label_values(names: Sequence[str]) -> np.ndarray | None:
    """The numeric value of each class name ('1' .. '5' stars), or None unless all are numbers."""
    try:
        return np.array([float(n) for n in names], dtype=np.float64)
    except ValueError:
        return None


def class_report(
    labels: np.ndarray, probs: np.ndarray, names: Sequence[str], *, ordered: bool = False
) -> dict[str, Any]:
    """Per-class precision/recall/F1/support, the confusion matrix and, for ordered labels, MAE.

    With ``ordered`` the classes are ranks (star ratings): the mean absolute error is taken
    on the label values when every name is a number, else on the class ids.
    """
    preds = probs.argmax(axis=1)
    matrix = confusion_matrix(labels, preds, len(names))
    precision, recall, f1, support, occurs = _per_class(matrix)
    report: dict[str, Any] = {
        "labels": list(names),
        "per_class": {
            name: {
                "precision": float(precision[i]),
                "recall": float(recall[i]),
                "f1": float(f1[i]),
                "support": int(support[i]),
                "predicted": int(matrix[:, i].sum()),
            }
            for i, name in enumerate(names)
        },
        "confusion": matrix.tolist(),
        "accuracy": float(np.mean(preds == labels)) if len(labels) else 0.0,
        "macro_f1": float(f1[occurs].mean()) if occurs.any() else 0.0,
        "classes_predicted": int((matrix.sum(axis=0) > 0).sum()),
        "n": len(labels),
    }
    if ordered:
        values = label_values(names)
        scale = values if values is not None else np.arange(len(names), dtype=np.float64)
        report["mae"] = float(np.mean(np.abs(scale[preds] - scale[labels]))) if len(labels) else 0.0
        report["mae_unit"] = "label value" if values is not None else "class rank"
    return report
