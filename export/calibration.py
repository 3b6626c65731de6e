"""Fitting a bundle's temperature on held-out rows, and the figures that say what it did.

Temperature scaling (Guo et al. 2017): one T > 0 per model, the minimiser of the negative
log-likelihood of softmax(logits / T) on labelled rows the model did not train on. The NLL
is convex in 1/T, so it has one minimum along log T, found by a golden-section search
between `T_MIN` and `T_MAX`. No temperature is fitted when the rows cannot place one: too
few of them, a minimum at either end (too few rows wrong or logits too flat, where sharper
is always better; or a model that barely tells the labels apart), or a T whose calibration
error on the very rows it was fitted on is worse than T = 1's (NLL rewards a few confident
right answers that the binned error does not). The figures are the expected calibration
error (15 equal-width confidence bins), NLL and mean confidence before (T = 1) and after,
and the accuracy, which T cannot move.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from attnserve.export.errors import ExportRequestError
from attnserve.export.evalset import EvalSet, graph_logits
from attnserve.service.bundle import ECE_BINS, MODEL_FILE, Calibration, Truncation, softmax

log = logging.getLogger(__name__)
T_MIN, T_MAX = 0.05, 20.0  # far outside the 1-3 that trained networks need (Guo et al. 2017)
MIN_ROWS = 50  # below this, a fitted temperature and its 15-bin ECE are noise
_STEPS = 80  # golden-section steps: the bracket shrinks 0.618x each, to ~1e-16 of log(T_MAX/T_MIN)
_AT_BOUND = 1e-3  # a log T this near either end is the end: no interior minimum
_GOLDEN = (math.sqrt(5) - 1) / 2


class CalibrationError(ExportRequestError):
    """The rows cannot place a temperature (module docstring); the message says why."""


@dataclass(frozen=True)
class RowsName:
    """How the manifest names the rows a temperature is fitted on."""

    file: str
    split: str
    sha256: str


def nll(logits: npt.NDArray[np.float32], labels: npt.NDArray[np.int64], temperature: float) -> float:
    """Mean negative log-likelihood of softmax(logits / T), in float64."""
    z = logits.astype(np.float64) / temperature
    top = z.max(axis=1)
    log_sum = top + np.log(np.exp(z - top[:, None]).sum(axis=1))
    return float(np.mean(log_sum - z[np.arange(len(labels)), labels]))


def ece(probabilities: npt.NDArray[np.float32], labels: npt.NDArray[np.int64], bins: int = ECE_BINS) -> float:
    """Expected calibration error: over equal-width bins of the top probability (lo, hi], the
    rows' share times |accuracy - mean confidence| in the bin, summed."""
    confidence = probabilities.max(axis=1).astype(np.float64)
    right = (probabilities.argmax(axis=1) == labels).astype(np.float64)
    index = np.clip(np.ceil(confidence * bins).astype(np.int64) - 1, 0, bins - 1)
    gap = np.bincount(index, weights=right - confidence, minlength=bins)  # per bin: sum(right - confidence)
    return float(np.abs(gap).sum() / max(len(labels), 1))


def fit_temperature(logits: npt.NDArray[np.float32], labels: npt.NDArray[np.int64]) -> float:
    """The T in [T_MIN, T_MAX] minimising `nll`; CalibrationError when the minimum is at an end."""
    if len(labels) < MIN_ROWS:
        raise CalibrationError(f"a temperature needs at least {MIN_ROWS} held-out rows, got {len(labels)}")
    lo, hi = math.log(T_MIN), math.log(T_MAX)
    a, b = hi - _GOLDEN * (hi - lo), lo + _GOLDEN * (hi - lo)
    fa, fb = nll(logits, labels, math.exp(a)), nll(logits, labels, math.exp(b))
    for _ in range(_STEPS):
        if fa <= fb:
            hi, b, fb = b, a, fa
            a = hi - _GOLDEN * (hi - lo)
            fa = nll(logits, labels, math.exp(a))
        else:
            lo, a, fa = a, b, fb
            b = lo + _GOLDEN * (hi - lo)
            fb = nll(logits, labels, math.exp(b))
    best = (lo + hi) / 2
    right = f"{int((logits.argmax(axis=1) == labels).sum())} of {len(labels)} rows right"
    if best - math.log(T_MIN) < _AT_BOUND:
        raise CalibrationError(
            f"the NLL still falls as T shrinks to {T_MIN:g} ({right}): too few rows wrong to place "
            "a temperature, or logits too flat for one to sharpen"
        )
    if math.log(T_MAX) - best < _AT_BOUND:
        raise CalibrationError(
            f"the NLL still falls as T grows to {T_MAX:g} ({right}): the model barely tells the "
            "labels apart on these rows"
        )
    return math.exp(best)


def calibrate(
    logits: npt.NDArray[np.float32], labels: npt.NDArray[np.int64], rows: RowsName, graph: str
) -> Calibration:
    """Fit T on `logits` (the graph's, [N, C]) and `labels` ([N]); the manifest's record of it."""
    temperature = round(fit_temperature(logits, labels), 6)  # the figures are those of the recorded T
    before, after = softmax(logits), softmax(logits, temperature)
    ece_before, ece_after = ece(before, labels), ece(after, labels)
    if ece_after > ece_before:
        raise CalibrationError(
            f"the fitted T = {temperature:.4g} would raise the calibration error on these rows from "
            f"{ece_before:.4f} to {ece_after:.4f}"
        )
    return Calibration(
        temperature=temperature,
        graph=graph,
        file=rows.file,
        split=rows.split,
        rows=len(labels),
        sha256=rows.sha256,
        bins=ECE_BINS,
        ece_before=ece_before,
        ece_after=ece_after,
        nll_before=nll(logits, labels, 1.0),
        nll_after=nll(logits, labels, temperature),
        confidence_before=float(before.max(axis=1).mean()),
        confidence_after=float(after.max(axis=1).mean()),
        accuracy=float((logits.argmax(axis=1) == labels).mean()),
    )


def calibrate_graph(
    session: ort.InferenceSession,
    tokenizer_path: Path,
    rows: EvalSet,
    named: RowsName,
    max_len: int,
    truncation: Truncation | None,
) -> Calibration:
    """Fit a temperature on model.onnx's logits (``session``: the attention graph, which every
    bundle has and which a cascade decides on) for ``rows``, tokenized as the server will.
    CalibrationError for multi-label rows: a temperature calibrates one softmax over the labels."""
    if rows.multi_label:
        raise CalibrationError(
            "the rows hold several labels each (multi-label): temperature scaling calibrates a softmax "
            "over one label per row, not a sigmoid per label"
        )
    logits = graph_logits(session, tokenizer_path, rows.texts, max_len, truncation)
    return calibrate(logits, rows.labels, named, MODEL_FILE)


def calibrate_or_warn(
    session: ort.InferenceSession,
    tokenizer_path: Path,
    rows: EvalSet,
    named: RowsName,
    max_len: int,
    truncation: Truncation | None,
) -> Calibration | None:
    """`calibrate_graph`, or None with a warning where the rows place no temperature (the
    bundle then serves at T = 1): an export goes on without one."""
    try:
        calibration = calibrate_graph(session, tokenizer_path, rows, named, max_len, truncation)
    except CalibrationError as exc:
        log.warning("no temperature fitted on %s (%s); probabilities are served at T = 1: %s",
                    named.file, named.split, exc)  # fmt: skip
        return None
    log.info("temperature %.4f on %d rows of %s: ECE %.4f -> %.4f", calibration.temperature,
             calibration.rows, named.file, calibration.ece_before, calibration.ece_after)  # fmt: skip
    return calibration
