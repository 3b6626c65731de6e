"""The encoder's second graph: logits only, for the calls that ask no attention.

A call that asks no attention needs neither the attention output nor float32 weights, and on
a BERT encoder those are where the time goes. So an encoder bundle ships a label graph beside
model.onnx: the same graph cut down to ``logits``, dynamically quantized to int8 with one scale
per output channel when that form keeps the held-out accuracy within the gate and strays no
further than the declared tolerance on the golden texts, and the float32 cut otherwise. Its
labels and logits are compared with the float32 graph's on the held-out rows and recorded.
"Held-out accuracy" and "labels" are the model's own: the argmax of a softmax classifier, the
labels over their thresholds of a multi-label one (``GateMetric``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx.utils

from attnserve.export.contract import ATTENTION_MASK, INPUT_IDS, LOGITS
from attnserve.export.errors import ExportError, QuantizationRefused
from attnserve.export.evalset import EvalSet, encode_chunks
from attnserve.export.golden import golden_deviation
from attnserve.export.parity import cpu_session, run_onnx
from attnserve.export.quantize import (
    ACCURACY,
    GateMetric,
    check_golden_tolerance,
    judge_accuracy,
    quantize_int8,
)
from attnserve.service.bundle import GateRows, GoldenCase, LabelGraph, QuantizationInfo, Truncation

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LabelSource:
    """What the label graph is built from and measured on."""

    graph: Path  # the attention graph as shipped (float32, or int8 under --quantize int8)
    float_graph: Path  # the float32 export, the reference of the gate
    tokenizer: Path
    max_len: int
    truncation: Truncation
    golden: list[GoldenCase]
    gate: tuple[EvalSet, GateRows] | None  # the run's held-out rows; None: no int8 attempt
    max_drop: float
    int8_tolerance: float
    tolerance: float  # the golden cases' tolerance for ``graph`` cut down as it is
    quantization: QuantizationInfo | None  # ``graph``'s own, when it is int8 already
    metric: GateMetric = ACCURACY  # what the gate compares, and which labels count as differing


def logits_only(source: Path, target: Path) -> None:
    """Write ``source`` cut down to the nodes ``logits`` needs."""
    try:
        onnx.utils.extract_model(str(source), str(target), [INPUT_IDS, ATTENTION_MASK], [LOGITS])
    except Exception as exc:  # onnx raises assorted types for a graph it cannot cut
        raise ExportError(f"cutting {source.name} to its logits failed: {type(exc).__name__}: {exc}") from exc


def build_label_graph(source: LabelSource, work: Path, target: Path, *, try_int8: bool) -> LabelGraph:
    """Write the label graph to ``target`` and say what it is."""
    cut = work / "label-float.onnx"
    logits_only(source.graph, cut)
    chosen, quantization = cut, source.quantization
    # The float32 graph's logits on the held-out rows: the gate's reference and the comparison's,
    # run once for both.
    reference = _held_out(source, source.float_graph)
    chosen_logits = None
    if try_int8 and source.gate is not None and reference is not None and source.quantization is None:
        _, named = source.gate
        quantized = work / "label-int8.onnx"
        quantize_int8(cut, quantized, per_channel=True)
        int8_logits = _held_out(source, quantized)
        assert int8_logits is not None
        labels = reference[1]
        try:
            change = judge_accuracy(
                source.metric.score(reference[0], labels),
                source.metric.score(int8_logits[0], labels),
                named,
                source.max_drop,
                source.int8_tolerance,
                source.metric.name,
            )
            seen = golden_deviation(
                cpu_session(quantized), source.golden, source.tokenizer, source.max_len, source.truncation,
                logits_only=True,
            )  # fmt: skip
            check_golden_tolerance(seen, source.int8_tolerance)
        except QuantizationRefused as refused:
            log.warning("label graph stays float32: %s", refused)
        else:
            chosen, quantization, chosen_logits = quantized, change.info(), int8_logits[0]
    else:
        session = cpu_session(cut)
        seen = golden_deviation(
            session, source.golden, source.tokenizer, source.max_len, source.truncation, logits_only=True
        )
        if not seen <= source.tolerance:
            raise ExportError(f"the label graph strays from PyTorch by {seen:.3g} on the golden texts")
    rows_count, differing, worst = 0, 0, 0.0  # none recorded when the run has no held-out rows
    if reference is not None:
        if chosen_logits is None:
            cut_logits = _held_out(source, cut)
            assert cut_logits is not None
            chosen_logits = cut_logits[0]
        expected = reference[0]
        rows_count = len(expected)
        differing = source.metric.differing(expected, chosen_logits)
        worst = float(np.max(np.abs(chosen_logits - expected))) if rows_count else 0.0
    log.info(
        "label graph: %s, %d of %d held-out labels differ from the float32 graph, logits within %.3g",
        "int8 per channel" if quantization is not None else "float32",
        differing,
        rows_count,
        worst,
    )
    target.write_bytes(chosen.read_bytes())
    return LabelGraph(
        file=target.name,
        quantization=quantization,
        rows=rows_count,
        labels_differing=differing,
        logits_max_abs_diff=worst,
    )


def _held_out(source: LabelSource, graph: Path) -> tuple[np.ndarray, np.ndarray] | None:
    """``graph``'s logits [N, C] on the held-out rows and their labels [N] (None without rows)."""
    if source.gate is None:
        return None
    rows, _ = source.gate
    session = cpu_session(graph)
    logits, labels = [], []
    for chunk in encode_chunks(source.tokenizer, rows, source.max_len, source.truncation):
        logits.append(run_onnx(session, chunk.input_ids, chunk.attention_mask).logits)  # [B, C]
        labels.append(np.asarray(chunk.labels))
    return np.concatenate(logits), np.concatenate(labels)
