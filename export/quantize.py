"""``--quantize int8``: onnxruntime dynamic quantization, accepted only if accuracy holds.

Weights of MatMul/Gather become int8 and activations are quantized on the fly, so the graph
keeps its float32 inputs and outputs and its symbolic dims. Accuracy on the run's test split
(test.jsonl: rows that neither trained the model nor chose its checkpoint) is measured with
the float graph and the int8 graph through onnxruntime; a drop larger than ``max_drop`` (a
fraction: 0.01 is one accuracy point) refuses the export. A multi-label model is gated the same
way on its micro-F1 at the bundle's thresholds (``MicroF1``): accuracy of an argmax says
nothing about labels assigned independently. The gate also declares, before
anything is measured, how far int8 outputs may stray from PyTorch's on the golden cases
(``tolerance``); that figure becomes their tolerance, checked at export and at every load.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
from onnxruntime.quantization import QuantType, quantize_dynamic

from attnserve.export.errors import ExportError, ExportRequestError, QuantizationRefused
from attnserve.export.evalset import EvalSet, encode_chunks
from attnserve.export.parity import cpu_session, run_onnx
from attnserve.export.thresholds import micro_f1
from attnserve.service.bundle import GateRows, QuantizationInfo, Scoring, Truncation

METHODS = ("int8",)
METHOD_NAME = "dynamic-int8"
DEFAULT_MAX_DROP = 0.01
# Largest |int8 - PyTorch| on a golden case's logits or attention weights: the test suite's
# 8-wide models stray by up to 0.33 on real texts, a 2-layer 32-wide BERT by 0.13 (export.md).
DEFAULT_INT8_TOLERANCE = 0.5
Floats = npt.NDArray[np.float32]
Labels = npt.NDArray[np.int64]  # [N] label ids; [N, C] 0/1 for a multi-label model's rows


class GateMetric(Protocol):
    """What the int8 gates compare between two graphs' logits on the held-out rows: a fraction,
    higher is better (so ``max_drop`` reads as points), named in ``QuantizationInfo.metric``."""

    @property
    def name(self) -> str: ...

    def score(self, logits: Floats, labels: Labels) -> float: ...

    def differing(self, reference: Floats, logits: Floats) -> int:
        """Rows whose served answer differs between the two graphs' logits."""
        ...


@dataclass(frozen=True)
class Accuracy:
    """A softmax classifier's: the argmax is the label served."""

    name: str = "accuracy"

    def score(self, logits: Floats, labels: Labels) -> float:
        return float((logits.argmax(axis=1) == labels).mean())

    def differing(self, reference: Floats, logits: Floats) -> int:
        return int((reference.argmax(axis=1) != logits.argmax(axis=1)).sum())


@dataclass(frozen=True)
class MicroF1:
    """A multi-label classifier's: the labels its sigmoids assign at the bundle's thresholds,
    scored as one F1 over every (row, label) pair."""

    scoring: Scoring
    name: str = "micro-F1 at the thresholds"

    def score(self, logits: Floats, labels: Labels) -> float:
        return micro_f1(self._assigned(logits), labels.astype(bool))

    def differing(self, reference: Floats, logits: Floats) -> int:
        return int((self._assigned(reference) != self._assigned(logits)).any(axis=1).sum())

    def _assigned(self, logits: Floats) -> npt.NDArray[np.bool_]:
        assigned = self.scoring.assigned(self.scoring.probabilities(logits))
        assert assigned is not None  # a multi-label scoring has thresholds
        return assigned


ACCURACY = Accuracy()


@dataclass(frozen=True)
class AccuracyChange:
    before: float
    after: float
    rows: GateRows
    max_drop: float
    tolerance: float
    metric: str = ACCURACY.name

    @property
    def drop(self) -> float:
        return self.before - self.after

    def info(self) -> QuantizationInfo:
        return QuantizationInfo(
            method=METHOD_NAME,
            metric=self.metric,
            before=self.before,
            after=self.after,
            max_drop=self.max_drop,
            tolerance=self.tolerance,
            rows=self.rows,
        )


def quantize_int8(source: Path, target: Path, *, per_channel: bool = False) -> None:
    """Write the dynamically int8-quantized form of ``source`` to ``target``.

    ``per_channel`` (pretrained encoders): one scale per output column. MiniLM fine-tuned on
    SST-2 lost 1.6 points of validation accuracy with one scale per tensor and none with one
    per channel (docs/results/encoder.md). The small families keep one scale per tensor: on
    them per-channel quantization wrote a fixed sequence length into the graph.
    """
    quant_log = logging.getLogger("root")  # the quantizer logs its per-node notes on the root logger
    level = quant_log.level
    quant_log.setLevel(logging.ERROR)
    try:
        # MatMulConstBOnly leaves the activation-by-activation products (scores, attention x values)
        # in float, so the attention output is not quantized twice.
        quantize_dynamic(
            source,
            target,
            weight_type=QuantType.QInt8,
            per_channel=per_channel,
            extra_options={"MatMulConstBOnly": True},
        )
    except Exception as exc:  # the quantizer raises assorted types; keep the cause attached
        raise ExportError(f"int8 quantization of {source.name} failed: {type(exc).__name__}: {exc}") from exc
    finally:
        quant_log.setLevel(level)


def accuracy(
    session: ort.InferenceSession,
    tokenizer_path: Path,
    rows: EvalSet,
    max_len: int,
    truncation: Truncation,
    metric: GateMetric = ACCURACY,
) -> float:
    """``metric`` (accuracy unless told) of the graph in ``session`` on ``rows``."""
    logits, labels = [], []
    for chunk in encode_chunks(tokenizer_path, rows, max_len, truncation):
        logits.append(run_onnx(session, chunk.input_ids, chunk.attention_mask).logits)  # [B, C]
        labels.append(chunk.labels)
    return metric.score(np.concatenate(logits), np.concatenate(labels))


def check_tolerance(tolerance: float) -> None:
    if not (np.isfinite(tolerance) and tolerance > 0):
        raise ExportRequestError(f"the int8 output tolerance must be a finite number > 0, got {tolerance}")


def check_accuracy(
    float_graph: Path,
    int8_graph: Path,
    *,
    tokenizer_path: Path,
    rows: EvalSet,
    named: GateRows,
    max_len: int,
    truncation: Truncation,
    max_drop: float = DEFAULT_MAX_DROP,
    tolerance: float = DEFAULT_INT8_TOLERANCE,
    metric: GateMetric = ACCURACY,
) -> AccuracyChange:
    """Measure both graphs on the held-out ``rows``; raise QuantizationRefused past ``max_drop``."""
    before = accuracy(cpu_session(float_graph), tokenizer_path, rows, max_len, truncation, metric)
    after = accuracy(cpu_session(int8_graph), tokenizer_path, rows, max_len, truncation, metric)
    return judge_accuracy(before, after, named, max_drop, tolerance, metric.name)


def judge_accuracy(
    before: float,
    after: float,
    named: GateRows,
    max_drop: float,
    tolerance: float,
    metric: str = ACCURACY.name,
) -> AccuracyChange:
    """The gate on ``metric`` already measured on ``named``'s rows: QuantizationRefused past ``max_drop``."""
    if not np.isfinite(max_drop):
        raise ExportError(f"max accuracy drop must be a finite number, got {max_drop}")
    change = AccuracyChange(
        before=before, after=after, rows=named, max_drop=max_drop, tolerance=tolerance, metric=metric
    )
    if change.drop > max_drop:
        raise QuantizationRefused(
            f"int8 quantization refused: held-out {metric} ({named.file}) {change.before:.4f} -> "
            f"{change.after:.4f} on {named.rows} examples is a drop of {100 * change.drop:.2f} points, "
            f"more than the allowed {100 * max_drop:.2f} (raise --max-accuracy-drop to accept it)"
        )
    return change


def check_golden_tolerance(deviation: float, tolerance: float) -> None:
    """QuantizationRefused when int8 strays from PyTorch past the declared tolerance on the golden texts."""
    if not deviation <= tolerance:  # also catches NaN
        raise QuantizationRefused(
            f"int8 quantization refused: on the golden texts the int8 graph differs from PyTorch by "
            f"{deviation:.3g}, more than the declared tolerance {tolerance:g} (raise --int8-tolerance "
            "to accept it)"
        )
