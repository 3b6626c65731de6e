"""What a model saw at training time, in the figures the server measures on its traffic.

`bundle.json`'s optional `data_profile` holds them: label shares, the model's confidence,
tokens per text, the share of `[UNK]` tokens per text and the share of texts cut at
`max_len`, with histograms on the same buckets as the server's Prometheus series, so the
dashboard and alert rules compare like with like. Export computes them (`profile_texts`);
bundles written before the field existed load without it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, model_validator

# Bucket upper bounds shared by the bundle's profile and the server's histograms.
CONFIDENCE_BUCKETS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0)
TOKEN_BUCKETS = (2.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0, 64.0, 96.0, 128.0, 256.0, 512.0, 1024.0)
UNKNOWN_RATIO_BUCKETS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Histogram(_Strict):
    """Counts per bucket: `counts[i]` values in (bounds[i-1], bounds[i]]; the last count is above all."""

    bounds: list[float] = Field(min_length=1)
    counts: list[int]

    @model_validator(mode="after")
    def _sized(self) -> Histogram:
        if len(self.counts) != len(self.bounds) + 1 or min(self.counts) < 0:
            raise ValueError("a histogram has one non-negative count per bound plus one above them")
        if any(b >= a for a, b in zip(self.bounds[1:], self.bounds, strict=False)):
            raise ValueError("histogram bounds must increase")
        return self

    @classmethod
    def of(cls, values: npt.ArrayLike, bounds: Sequence[float]) -> Histogram:
        index = np.searchsorted(np.asarray(bounds, dtype=np.float64), np.asarray(values, dtype=np.float64))
        return cls(bounds=list(bounds), counts=np.bincount(index, minlength=len(bounds) + 1).tolist())


class TrainingFigures(_Strict):
    """Figures of the training split itself, as training reported them (metrics.json `data`)."""

    texts: int = Field(ge=0)
    label_shares: dict[str, float] = Field(default_factory=dict)
    tokens_mean: float | None = Field(default=None, ge=0)
    truncated_share: float | None = Field(default=None, ge=0, le=1)
    unknown_token_share: float | None = Field(default=None, ge=0, le=1)


class DataProfile(_Strict):
    """The reference figures: `source` names the texts they were measured on."""

    source: str
    texts: int = Field(ge=1)
    label_shares: dict[str, float]  # true labels of the source texts
    predicted_label_shares: dict[str, float]  # what the model predicts on them
    confidence: Histogram  # top probability per text
    confidence_mean: float = Field(ge=0, le=1)
    tokens: Histogram  # tokens per text as the model sees them ([CLS] included, after truncation)
    tokens_mean: float = Field(ge=0)
    unknown_ratio: Histogram  # share of [UNK] among a text's tokens
    unknown_ratio_mean: float = Field(ge=0, le=1)
    truncated_share: float = Field(ge=0, le=1)
    training: TrainingFigures | None = None


def _shares(ids: npt.NDArray[np.int64], labels: Sequence[str]) -> dict[str, float]:
    counts = np.bincount(ids, minlength=len(labels))
    return {name: round(float(c) / max(int(ids.size), 1), 6) for name, c in zip(labels, counts, strict=True)}


def unknown_ratios(
    input_ids: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64], unk_id: int
) -> npt.NDArray[np.float64]:
    """Per row: [UNK] tokens over real tokens (0 for an empty row); padding never equals [UNK]."""
    unknown = (input_ids == unk_id).sum(axis=1)
    return np.asarray(unknown / np.maximum(lengths, 1), dtype=np.float64)


def profile_texts(
    *,
    source: str,
    labels: Sequence[str],
    true_label_ids: npt.NDArray[np.int64],  # [N]
    probabilities: npt.NDArray[np.float32],  # [N, C]
    lengths: npt.NDArray[np.int64],  # [N] tokens per text
    unknown_ratio: npt.NDArray[np.float64],  # [N]
    truncated: npt.NDArray[np.bool_],  # [N]
    training: TrainingFigures | None = None,
) -> DataProfile:
    if not len(lengths) == len(true_label_ids) == len(probabilities) == len(unknown_ratio) == len(truncated):
        raise ValueError("profile_texts needs one value per text in every array")
    if len(lengths) == 0:
        raise ValueError("profile_texts needs at least one text")
    confidence = probabilities.max(axis=1)
    return DataProfile(
        source=source,
        texts=len(lengths),
        label_shares=_shares(true_label_ids, labels),
        predicted_label_shares=_shares(probabilities.argmax(axis=1), labels),
        confidence=Histogram.of(confidence, CONFIDENCE_BUCKETS),
        confidence_mean=round(float(confidence.mean()), 6),
        tokens=Histogram.of(lengths, TOKEN_BUCKETS),
        tokens_mean=round(float(lengths.mean()), 4),
        unknown_ratio=Histogram.of(unknown_ratio, UNKNOWN_RATIO_BUCKETS),
        unknown_ratio_mean=round(float(unknown_ratio.mean()), 6),
        truncated_share=round(float(truncated.mean()), 6),
        training=training,
    )
