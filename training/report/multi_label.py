"""Multi-label figures: micro-F1, macro-F1 and exact match at a threshold (numpy only).

A multi-label model answers each label on its own (a sigmoid per label), so accuracy, the
argmax's figure, says nothing about it. Its figures count the (text, label) cells instead:
micro-F1 pools every cell (frequent labels weigh more), macro-F1 averages the labels' own F1
(over the labels that occur in the targets or the predictions, as training/report/metrics.py
does for classes), and exact match is the share of texts whose whole label set is right.
Each reads the probabilities at ``DEFAULT_THRESHOLD`` (0.5): what the model says before export
chooses its served thresholds (export/run_scoring.py). A split where no text has a label and
none is given one scores 1 on both F1s, as export's micro-F1 (export/thresholds.py) does: the
model found everything there was, and nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from attnserve.training.report.data import DataReport

DEFAULT_THRESHOLD = 0.5  # the served default too (service/bundle/scoring.py)


@dataclass(frozen=True)
class MultiScores:
    loss: float  # mean binary cross-entropy over the (text, label) cells
    micro_f1: float
    macro_f1: float
    exact_match: float  # share of texts whose predicted label set is exactly theirs
    labels_per_text: float  # mean labels a text has
    predicted_per_text: float  # mean labels the model gives a text
    n: int

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}


def _counts(targets: np.ndarray, predicted: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """True positives, predicted and actual counts per label ([C] each)."""
    truth = targets.astype(bool)
    return (truth & predicted).sum(axis=0), predicted.sum(axis=0), truth.sum(axis=0)


def _f1(tp: np.ndarray, predicted: np.ndarray, support: np.ndarray) -> np.ndarray:
    total = (predicted + support).astype(np.float64)
    return np.where(total > 0, 2.0 * tp / np.maximum(total, 1.0), 0.0)


def micro_f1(targets: np.ndarray, predicted: np.ndarray) -> float:
    """F1 over every (text, label) cell: ``targets`` and ``predicted`` are [N, C] 0/1."""
    tp, guessed, support = _counts(targets, predicted.astype(bool))
    total = int(guessed.sum() + support.sum())
    return 2.0 * int(tp.sum()) / total if total else 1.0


def multi_score(
    targets: np.ndarray, probs: np.ndarray, loss: float, threshold: float = DEFAULT_THRESHOLD
) -> MultiScores:
    """Every figure at once; ``targets`` [N, C] 0/1, ``probs`` [N, C] sigmoids."""
    if len(targets) == 0:
        raise ValueError("cannot score an empty split")
    predicted = probs >= threshold
    tp, guessed, support = _counts(targets, predicted)
    occurs = (guessed + support) > 0
    f1 = _f1(tp, guessed, support)
    return MultiScores(
        loss=float(loss),
        micro_f1=micro_f1(targets, predicted),
        macro_f1=float(f1[occurs].mean()) if occurs.any() else 1.0,
        exact_match=float(np.mean(np.all(predicted == targets.astype(bool), axis=1))),
        labels_per_text=float(support.sum() / len(targets)),
        predicted_per_text=float(guessed.sum() / len(targets)),
        n=len(targets),
    )


def label_report(
    targets: np.ndarray, probs: np.ndarray, names: Sequence[str], threshold: float = DEFAULT_THRESHOLD
) -> dict[str, Any]:
    """report.json's entry for a split: per-label precision/recall/F1/support and the figures."""
    predicted = probs >= threshold
    tp, guessed, support = _counts(targets, predicted)
    f1 = _f1(tp, guessed, support)
    scores = multi_score(targets, probs, 0.0, threshold) if len(targets) else None
    return {
        "labels": list(names),
        "threshold": threshold,
        "per_label": {
            name: {
                "precision": float(tp[i] / guessed[i]) if guessed[i] else 0.0,
                "recall": float(tp[i] / support[i]) if support[i] else 0.0,
                "f1": float(f1[i]),
                "support": int(support[i]),
                "predicted": int(guessed[i]),
            }
            for i, name in enumerate(names)
        },
        "micro_f1": scores.micro_f1 if scores else 0.0,
        "macro_f1": scores.macro_f1 if scores else 0.0,
        "exact_match": scores.exact_match if scores else 0.0,
        "texts_without_labels": int((~targets.astype(bool).any(axis=1)).sum()),
        "n": len(targets),
    }


def label_warnings(split: str, report: dict[str, Any]) -> list[str]:
    """Labels a split holds that the model never gives at the threshold: its F1 of 0 would
    otherwise hide in the averages."""
    missed = [n for n, row in report["per_label"].items() if row["support"] > 0 and row["predicted"] == 0]
    if not missed:
        return []
    return [
        f"the model gives no {split} text the label(s) {', '.join(repr(n) for n in missed)} at threshold "
        f"{report['threshold']:g} although {split} holds them: more steps (--min-steps), more rows of "
        "those labels, or check the labels"
    ]


def check_label_counts(report: DataReport, names: Sequence[str], train_tags: Sequence[Sequence[int]]) -> None:
    """Training rows per label (a text counts once for each of its labels), rows with none."""
    counts = np.bincount([t for tags in train_tags for t in tags], minlength=len(names))
    per_label = {name: int(counts[i]) for i, name in enumerate(names)}
    bare = sum(1 for tags in train_tags if not tags)
    report.figures["train_classes"] = per_label
    report.figures["train_rows_without_labels"] = bare
    total = max(len(train_tags), 1)
    report.notes.append(
        "training rows per label: "
        + ", ".join(f"{n} {c} ({c / total:.1%})" for n, c in per_label.items())
        + f"; {bare} ({bare / total:.1%}) without a label"
    )
    missing = [n for n, c in per_label.items() if c == 0]
    if missing:
        report.warnings.append(
            f"label(s) {', '.join(repr(n) for n in missing)} occur only outside the training data: "
            "the model cannot learn them"
        )
