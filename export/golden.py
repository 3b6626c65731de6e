"""Golden cases: a few validation texts with the outputs the bundle must reproduce.

Each case is one text encoded alone (batch of one, no padding) with the bundle's tokenizer;
the expected logits and attention are the PyTorch model's. The service runs them through the
graph before a version takes traffic, so a wrong tokenizer, a damaged graph or a provider
that computes something else is caught at load time, not by users.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from attnserve.export.errors import ExportError
from attnserve.export.evalset import EvalSet, encode_one
from attnserve.export.parity import run_onnx, run_torch
from attnserve.service.bundle import GoldenCase, Truncation
from attnserve.training.models.base import Classifier

DEFAULT_COUNT = 4


def pick_texts(eval_set: EvalSet, count: int) -> list[str]:
    """The first text of each label in file order, then the next ones, ``count`` in all (for
    multi-label rows, the first text that has each label)."""
    if count < 1:
        raise ExportError(f"the golden set needs at least one case, got count={count}")
    labels = eval_set.labels
    if eval_set.multi_label:  # [N, C] 0/1: the first row of each label's column
        firsts = {int(np.flatnonzero(column)[0]) for column in labels.T if column.any()}
    else:
        firsts = {int(np.flatnonzero(labels == label)[0]) for label in set(labels.tolist())}
    picked = sorted(firsts)[:count]
    for index in range(len(eval_set)):
        if len(picked) >= count:
            break
        if index not in picked:
            picked.append(index)
    return [eval_set.texts[i] for i in picked]


def make_golden(
    model: Classifier,
    tokenizer_path: Path,
    texts: list[str],
    *,
    max_len: int,
    truncation: Truncation,
    tolerance: float,
) -> list[GoldenCase]:
    cases = []
    for text in texts:
        ids, mask = encode_one(tokenizer_path, text, max_len, truncation)  # [1, T]
        if ids.shape[1] == 0:
            raise ExportError(f"golden text {text!r} encodes to no tokens")
        out = run_torch(model, ids, mask)
        attention = None if out.attention is None else out.attention[0]  # per-text shape
        cases.append(
            GoldenCase(
                text=text,
                input_ids=[int(i) for i in ids[0]],
                logits=_float32_list(out.logits[0]),
                attention=None if attention is None else _float32_list(attention.ravel()),
                attention_shape=None if attention is None else list(attention.shape),
                tolerance=tolerance,
            )
        )
    return cases


def _float32_list(values: np.ndarray) -> list[float]:
    """Nine significant digits: the shortest decimal form that reads back as the same float32."""
    return [float(format(v, ".9g")) for v in values.astype(np.float32).tolist()]


def golden_deviation(
    session: ort.InferenceSession,
    cases: list[GoldenCase],
    tokenizer_path: Path,
    max_len: int,
    truncation: Truncation | None,
    *,
    logits_only: bool = False,
) -> float:
    """The largest |graph - expected| over all cases, logits and attention alike (logits only
    for a graph that has no attention output).

    Each text is encoded again with ``tokenizer_path``, cut on the ``truncation`` side; ids
    that differ from the recorded ones are an ExportError, since the outputs would then be
    for a different input.
    """
    worst = 0.0
    for case in cases:
        ids, mask = encode_one(tokenizer_path, case.text, max_len, truncation)
        if case.input_ids is not None and ids[0].tolist() != case.input_ids:
            raise ExportError(
                f"golden text {case.text!r}: the tokenizer gives {ids[0].tolist()}, expected {case.input_ids}"
            )
        out = run_onnx(session, ids, mask)
        worst = max(worst, _max_diff(out.logits[0], np.asarray(case.logits, dtype=np.float32)))
        expected = None if logits_only else case.attention_array()
        if expected is not None:
            if out.attention is None or out.attention[0].shape != expected.shape:
                raise ExportError(
                    f"golden text {case.text!r}: the graph's attention does not have shape {expected.shape}"
                )
            worst = max(worst, _max_diff(out.attention[0], expected))
    return worst


def verify_golden(
    session: ort.InferenceSession,
    cases: list[GoldenCase],
    tokenizer_path: Path,
    max_len: int,
    truncation: Truncation | None,
) -> None:
    """Run every case through ``session``; ExportError if one strays beyond its tolerance."""
    for case in cases:
        diff = golden_deviation(session, [case], tokenizer_path, max_len, truncation)
        if not diff <= case.tolerance:
            raise ExportError(
                f"golden text {case.text!r}: the graph differs from the expected outputs by {diff:.3g} "
                f"> tolerance {case.tolerance:g}"
            )


def _max_diff(actual: np.ndarray, expected: np.ndarray) -> float:
    if actual.shape != expected.shape:
        return float("inf")
    return float(np.max(np.abs(actual.astype(np.float64) - expected))) if actual.size else 0.0
