"""What a model's scores mean: one softmax over labels, a sigmoid per label, or a value.

A Hugging Face classifier says it in `config.json`'s `problem_type`, and the bundle keeps the
same three words in `bundle.json`'s optional `scoring` (absent: single-label, as every bundle
before it). The server computes its probabilities with `Scoring.probabilities` and, for a
multi-label model, the labels it assigns with `Scoring.assigned`; export uses the same two
functions, so a threshold chosen there sees the served float32 values.

Standard library, pydantic and numpy only: part of the torch-free serving install.
"""

from __future__ import annotations

import enum

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, model_validator

from attnserve.service.bundle.calibration import softmax

DEFAULT_THRESHOLD = 0.5
Floats = npt.NDArray[np.float32]


class Problem(enum.StrEnum):
    """transformers' `problem_type` words, kept as they are."""

    SINGLE_LABEL = "single_label_classification"  # softmax over the labels; one label per text
    MULTI_LABEL = "multi_label_classification"  # a sigmoid per label; the labels over their thresholds
    REGRESSION = "regression"  # one output: the value itself


class Thresholds(BaseModel):
    """Where a multi-label model's per-label thresholds came from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: str  # "default" (0.5 each) or "f1 per label" (chosen on labelled rows)
    file: str | None = None  # the rows that chose them, e.g. "dev.csv"
    rows: int | None = Field(default=None, ge=1)
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")


class Scoring(BaseModel):
    """A bundle's problem and, for multi-label, one threshold per label (in label order)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    problem: Problem = Problem.SINGLE_LABEL
    thresholds: list[float] | None = None  # multi-label only: each in (0, 1)
    chosen: Thresholds | None = None  # multi-label only: how the thresholds were chosen

    @model_validator(mode="after")
    def _consistent(self) -> Scoring:
        multi = self.problem == Problem.MULTI_LABEL
        if not multi and (self.thresholds is not None or self.chosen is not None):
            raise ValueError(f"thresholds belong to multi-label models, not {self.problem.value}")
        if multi and self.thresholds is None:
            raise ValueError("a multi-label model needs one threshold per label")
        if self.thresholds is not None and not all(0.0 < t < 1.0 for t in self.thresholds):
            raise ValueError(f"thresholds must lie strictly between 0 and 1, got {self.thresholds}")
        return self

    @classmethod
    def multi_label(cls, labels: int, thresholds: list[float] | None = None,
                    chosen: Thresholds | None = None) -> Scoring:  # fmt: skip
        """Multi-label scoring, at 0.5 per label unless thresholds are given."""
        values = thresholds if thresholds is not None else [DEFAULT_THRESHOLD] * labels
        chosen = chosen or Thresholds(method="default")
        return cls(problem=Problem.MULTI_LABEL, thresholds=values, chosen=chosen)

    @property
    def multi(self) -> bool:
        return self.problem == Problem.MULTI_LABEL

    @property
    def regression(self) -> bool:
        return self.problem == Problem.REGRESSION

    def check_labels(self, labels: int) -> None:
        """ValueError where the label count does not fit the problem."""
        if self.regression and labels != 1:
            raise ValueError(f"labels lists {labels}; a regression model has one output")
        if not self.regression and labels < 2:
            raise ValueError(f"labels lists {labels}; a {self.problem.value} model needs at least 2")
        if self.thresholds is not None and len(self.thresholds) != labels:
            raise ValueError(f"labels lists {labels}, scoring has {len(self.thresholds)} thresholds")

    def probabilities(self, logits: npt.NDArray[np.float32], temperature: float = 1.0) -> Floats:
        """The served scores [B, C]: softmax(logits / T), sigmoid(logits) per label, or the value."""
        if self.problem == Problem.SINGLE_LABEL:
            return softmax(logits, temperature)
        if self.regression:
            return np.asarray(logits, dtype=np.float32)
        return sigmoid(logits)

    def assigned(self, probabilities: npt.NDArray[np.float32]) -> npt.NDArray[np.bool_] | None:
        """[B, C]: a multi-label model's labels at or over their thresholds; None for the others."""
        if self.thresholds is None:
            return None
        return np.asarray(probabilities >= np.asarray(self.thresholds, dtype=np.float32))


SINGLE_LABEL = Scoring()


def sigmoid(logits: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """1 / (1 + exp(-x)) elementwise in float32, without overflow for large |x|."""
    x = np.asarray(logits, dtype=np.float32)
    out = np.empty_like(x)
    positive = x >= 0
    out[positive] = 1.0 / (1.0 + np.exp(-x[positive]))
    e = np.exp(x[~positive])
    out[~positive] = e / (1.0 + e)
    return out
