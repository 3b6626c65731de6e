"""A multi-label model's per-label thresholds, chosen on labelled rows, and its micro-F1.

A multi-label classifier scores each label with its own sigmoid; the label is assigned when
that probability is at or over the label's threshold (``Scoring.assigned``). 0.5 is where
transformers' binary cross-entropy puts the decision, but a label that is rare in training
ends up with probabilities that seldom reach it, so with labelled rows each label gets the
threshold that maximises its own F1 on them. The search is exact: every threshold between two
neighbouring probabilities assigns the same rows, so one candidate per gap is tried (0.5 where
the gap holds it, else the gap's middle, which leaves a margin on both sides for a served
float32 value that differs from the measured one in its last bits). Among equally good
candidates the one closest to 0.5 wins, so 0.5 is kept wherever it is as good as any: a label
no row carries scores F1 0 at every threshold and keeps 0.5.

Pure numpy, float32 comparisons exactly as the server makes them.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from attnserve.service.bundle import DEFAULT_THRESHOLD

Floats = npt.NDArray[np.float32]
Bools = npt.NDArray[np.bool_]
_HALF = np.float32(DEFAULT_THRESHOLD)


def choose_thresholds(probabilities: Floats, targets: Bools) -> list[float]:
    """Per label (column), the threshold in (0, 1) maximising that label's F1 on the rows.

    ``probabilities`` [N, C] are the served sigmoids, ``targets`` [N, C] the labels each row
    carries. Each threshold is a float32 value, so the one the manifest records is the one the
    server compares with.
    """
    p = np.asarray(probabilities, dtype=np.float32)
    t = np.asarray(targets, dtype=bool)
    if p.ndim != 2 or p.shape != t.shape:
        raise ValueError(f"probabilities {p.shape} and targets {t.shape} must both be [rows, labels]")
    if p.shape[0] == 0:
        raise ValueError("thresholds need at least one row")
    if not (np.all(np.isfinite(p)) and np.all((p >= 0) & (p <= 1))):
        raise ValueError("probabilities must be finite and within [0, 1]")
    return [_best(p[:, c], t[:, c]) for c in range(p.shape[1])]


def label_f1(probabilities: Floats, targets: Bools, threshold: float) -> float:
    """One label's F1 when the rows at or over ``threshold`` are assigned it; 0 with no true positive."""
    assigned = np.asarray(probabilities, dtype=np.float32) >= np.float32(threshold)
    true = np.asarray(targets, dtype=bool)
    tp = int((assigned & true).sum())
    return 2 * tp / (int(assigned.sum()) + int(true.sum())) if tp else 0.0


def micro_f1(assigned: Bools, targets: Bools) -> float:
    """F1 over every (row, label) pair together; 1 when no row carries or is assigned a label."""
    a, t = np.asarray(assigned, dtype=bool), np.asarray(targets, dtype=bool)
    if a.shape != t.shape:
        raise ValueError(f"assigned {a.shape} and targets {t.shape} differ in shape")
    tp, total = int((a & t).sum()), int(a.sum()) + int(t.sum())
    return 2 * tp / total if total else 1.0


def _best(p: Floats, t: Bools) -> float:
    """The F1-maximising threshold of one label (module docstring)."""
    order = np.argsort(-p, kind="stable")
    ps, ts = p[order], t[order]  # probabilities high to low
    positives = int(ts.sum())
    hits = np.concatenate([[0], np.cumsum(ts)])  # true positives when the top m rows are assigned
    n = len(ps)
    # A cut assigns the top m rows, m where the next row's probability is lower (every value
    # ties with its equals): its thresholds are (ps[m], ps[m - 1]], with 0 below and 1 above.
    cuts = [0, *(m for m in range(1, n) if ps[m] < ps[m - 1]), n]
    best: tuple[float, float] | None = None  # (-F1, distance from 0.5)
    chosen = float(_HALF)
    for m in cuts:
        low = ps[m] if m < n else np.float32(0.0)  # exclusive
        high = ps[m - 1] if m > 0 else None  # inclusive; None: below 1, exclusive
        threshold = _inside(low, high)
        if threshold is None:
            continue  # no float32 threshold in (0, 1) assigns exactly these rows
        tp = int(hits[m])
        f1 = 2 * tp / (m + positives) if tp else 0.0
        key = (-f1, abs(float(threshold) - DEFAULT_THRESHOLD))
        if best is None or key < best:
            best, chosen = key, float(threshold)
    return chosen


def _inside(low: np.float32, high: np.float32 | None) -> np.float32 | None:
    """A float32 threshold t with low < t <= high (t < 1 where high is None) and 0 < t < 1:
    0.5 when it qualifies, else the middle of the gap, else its top; None when there is none."""
    top = np.float32(np.nextafter(np.float32(1.0), np.float32(0.0))) if high is None else high
    if not low < top or not top > 0 or low >= 1:
        return None
    if low < _HALF <= top:
        return _HALF
    middle = np.float32((float(low) + float(top)) / 2)
    candidate = middle if low < middle <= top else top
    return candidate if 0 < candidate < 1 else None
