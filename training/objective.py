"""What training optimises and which epoch it keeps: the epoch budget, class weights, selection.

Kept apart from the loop in ``trainer`` so these policies read (and are tested) on their own.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from attnserve.training.metrics import Scores

SELECT_BY = ("macro_f1", "loss", "accuracy")
CLASS_WEIGHTS = ("none", "balanced")
DEFAULT_EPOCHS = 25


def planned_epochs(epochs: int, min_steps: int, batch_size: int, n_train: int) -> int:
    """``epochs`` if above 0, else 25 raised until the run makes at least ``min_steps`` steps."""
    if epochs > 0:
        return epochs
    steps_per_epoch = max(math.ceil(n_train / batch_size), 1)
    return max(DEFAULT_EPOCHS, math.ceil(min_steps / steps_per_epoch))


def class_weight_tensor(kind: str, labels: np.ndarray, num_classes: int) -> torch.Tensor | None:
    """Inverse-frequency weights (mean 1 over the classes present) for ``balanced``, else None."""
    if kind == "none":
        return None
    counts = np.bincount(labels, minlength=num_classes).astype(np.float64)
    present = counts > 0
    weights = np.zeros(num_classes)
    weights[present] = counts.sum() / (present.sum() * counts[present])
    return torch.tensor(weights, dtype=torch.float32)


def selection_key(select_by: str, scores: Scores) -> tuple[float, ...]:
    """Larger is better; validation loss breaks ties of macro-F1 or accuracy."""
    if select_by == "loss":
        return (-scores.loss,)
    return (getattr(scores, select_by), -scores.loss)
