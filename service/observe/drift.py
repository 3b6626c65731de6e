"""What the model sees in production, per model version, next to what it saw in training.

    drift = DriftMetrics(registry)                           # beside engine.metrics.Metrics
    seen = drift.bind("car", 1, labels, unk_id=1, reference=manifest.data_profile)
    seen.observe_batch(probabilities, input_ids, attention_mask)   # once per batch, any thread
    seen.observe_truncated(encoded.truncated)                # at tokenization
    seen.unbind()                                            # when the version is unloaded

A batch is recorded with a few numpy reductions and one increment per histogram bucket it
touches (not one per text): a batch of 32 texts costs about what 3 single observations do.
The training figures are gauges set once at bind, so Prometheus can compare the two.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from attnserve.service.bundle.profile import (
    CONFIDENCE_BUCKETS,
    TOKEN_BUCKETS,
    UNKNOWN_RATIO_BUCKETS,
    DataProfile,
    unknown_ratios,
)

MODEL_VERSION = ("model", "version")


def observe_many(child: Histogram, values: npt.NDArray[np.floating] | npt.NDArray[np.integer]) -> None:
    """`child.observe(v)` for every v, with one increment per bucket hit.

    Histogram keeps non-cumulative bucket counts and a sum, each a prometheus_client value
    (a multiprocess file slot under --workers), so adding counts per bucket is exact.
    """
    if values.size == 1:
        child.observe(float(values.reshape(-1)[0]))
        return
    bounds: list[float] = child._upper_bounds  # ends with +Inf
    index = np.searchsorted(bounds, values, side="left")  # first bound >= value, as observe() picks
    buckets = child._buckets
    for i, count in enumerate(np.bincount(index, minlength=len(bounds)).tolist()):
        if count:
            buckets[i].inc(count)
    child._sum.inc(float(values.sum()))


class DriftMetrics:
    """The families, registered in `registry` (one per server, like engine.metrics.Metrics)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.predictions = Counter(
            "attnserve_predictions",
            "Texts by the label the model predicted.",
            (*MODEL_VERSION, "label"),
            registry=registry,
        )
        self.confidence = Histogram(
            "attnserve_prediction_confidence",
            "Top probability per text.",
            MODEL_VERSION,
            registry=registry,
            buckets=CONFIDENCE_BUCKETS,
        )
        self.tokens = Histogram(
            "attnserve_text_tokens",
            "Tokens per text as the model sees them ([CLS] included, after truncation).",
            MODEL_VERSION,
            registry=registry,
            buckets=TOKEN_BUCKETS,
        )
        self.unknown = Histogram(
            "attnserve_text_unknown_ratio",
            "Share of a text's tokens that are [UNK] (words outside the vocabulary).",
            MODEL_VERSION,
            registry=registry,
            buckets=UNKNOWN_RATIO_BUCKETS,
        )
        self.truncated = Counter(
            "attnserve_truncated_texts", "Texts cut at the model's max_len.", MODEL_VERSION, registry=registry
        )
        self.training_label_share = self._gauge(
            "attnserve_training_label_share",
            "Share of each label the model predicted on its validation split at export.",
            (*MODEL_VERSION, "label"),
            registry,
        )
        self.training_confidence = self._gauge(
            "attnserve_training_confidence_mean", "Mean top probability at export.", MODEL_VERSION, registry
        )
        self.training_tokens = self._gauge(
            "attnserve_training_text_tokens_mean", "Mean tokens per text at export.", MODEL_VERSION, registry
        )
        self.training_unknown = self._gauge(
            "attnserve_training_unknown_ratio_mean",
            "Mean share of [UNK] tokens per text at export.",
            MODEL_VERSION,
            registry,
        )
        self.training_truncated = self._gauge(
            "attnserve_training_truncated_ratio",
            "Share of texts cut at max_len at export.",
            MODEL_VERSION,
            registry,
        )
        self._bound: dict[tuple[str, str], int] = {}

    @staticmethod
    def _gauge(name: str, doc: str, labels: Sequence[str], registry: CollectorRegistry) -> Gauge:
        # Every worker sets the same value from the same bundle: any live one will do.
        return Gauge(name, doc, labels, registry=registry, multiprocess_mode="livemax")

    def bind(
        self,
        name: str,
        version: int,
        labels: Sequence[str],
        *,
        unk_id: int | None,
        reference: DataProfile | None = None,
    ) -> ModelDrift:
        v = str(version)
        self._bound[(name, v)] = self._bound.get((name, v), 0) + 1
        if reference is not None:
            for label in labels:
                share = reference.predicted_label_shares.get(label, 0.0)
                self.training_label_share.labels(name, v, label).set(share)
            self.training_confidence.labels(name, v).set(reference.confidence_mean)
            self.training_tokens.labels(name, v).set(reference.tokens_mean)
            self.training_unknown.labels(name, v).set(reference.unknown_ratio_mean)
            self.training_truncated.labels(name, v).set(reference.truncated_share)
        predictions = [self.predictions.labels(name, v, label) for label in labels]
        for child in predictions:
            child.inc(0)  # every label shows from the start, so shares have a denominator
        truncated = self.truncated.labels(name, v)
        truncated.inc(0)
        return ModelDrift(
            self,
            name,
            v,
            tuple(labels),
            unk_id,
            predictions,
            self.confidence.labels(name, v),
            self.tokens.labels(name, v),
            self.unknown.labels(name, v),
            truncated,
            reference is not None,
        )

    def _release(self, name: str, version: str) -> bool:
        left = self._bound.get((name, version), 0) - 1
        if left > 0:
            self._bound[(name, version)] = left
            return False
        self._bound.pop((name, version), None)
        return True


@dataclass(eq=False)
class ModelDrift:
    """Pre-bound series of one model version; `observe_batch` is safe from any thread."""

    metrics: DriftMetrics
    name: str
    version: str
    labels: tuple[str, ...]
    unk_id: int | None
    predictions: list[Counter]
    confidence: Histogram
    tokens: Histogram
    unknown: Histogram
    truncated: Counter
    has_reference: bool

    def observe_batch(
        self,
        probabilities: npt.NDArray[np.float32],  # [B, C]
        input_ids: npt.NDArray[np.int64],  # [B, T], padded
        attention_mask: npt.NDArray[np.int64],  # [B, T]
        label_ids: npt.NDArray[np.int64] | None = None,  # [B], argmax of probabilities if omitted
    ) -> None:
        if len(probabilities) == 1:  # the common single-text call: plain Python beats numpy on one row
            row: list[float] = probabilities[0].tolist()
            top = max(row)
            self.predictions[row.index(top)].inc()
            self.confidence.observe(top)
            length = sum(attention_mask[0].tolist())
            self.tokens.observe(length)
            if self.unk_id is not None:
                self.unknown.observe(input_ids[0].tolist().count(self.unk_id) / length if length else 0.0)
            return
        if label_ids is None:
            label_ids = probabilities.argmax(axis=1)
        for label, count in enumerate(np.bincount(label_ids, minlength=len(self.labels)).tolist()):
            if count:
                self.predictions[label].inc(count)
        observe_many(self.confidence, probabilities.max(axis=1))
        lengths = attention_mask.sum(axis=1)
        observe_many(self.tokens, lengths)
        if self.unk_id is not None:
            observe_many(self.unknown, unknown_ratios(input_ids, lengths, self.unk_id))

    def observe_truncated(self, truncated: Sequence[bool]) -> None:
        """Count texts cut at max_len (the tokenizer's per-text flags)."""
        count = sum(truncated)
        if count:
            self.truncated.inc(count)

    def unbind(self) -> None:
        """Drop this version's series (after it is unloaded), once no other binding holds them."""
        m = self.metrics
        if not m._release(self.name, self.version):
            return
        for label in self.labels:
            m.predictions.remove(self.name, self.version, label)
        for family in (m.confidence, m.tokens, m.unknown, m.truncated):
            family.remove(self.name, self.version)
        if self.has_reference:
            for label in self.labels:
                m.training_label_share.remove(self.name, self.version, label)
            for gauge in (m.training_confidence, m.training_tokens, m.training_unknown, m.training_truncated):
                gauge.remove(self.name, self.version)
