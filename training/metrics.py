"""Classification metrics computed from predicted probabilities (numpy only)."""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class Scores:
    loss: float
    accuracy: float
    macro_f1: float
    brier: float
    ece: float
    n: int

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}


def macro_f1(labels: np.ndarray, preds: np.ndarray, num_classes: int) -> float:
    f1s = []
    for c in range(num_classes):
        tp = float(np.sum((preds == c) & (labels == c)))
        fp = float(np.sum((preds == c) & (labels != c)))
        fn = float(np.sum((preds != c) & (labels == c)))
        denom = 2 * tp + fp + fn
        # A class absent from both labels and predictions is perfectly handled, not 0.
        f1s.append(1.0 if denom == 0 else 2 * tp / denom)
    return float(np.mean(f1s))


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
        n=len(labels),
    )
