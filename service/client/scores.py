"""What a result's scores say, by the model's problem type (ModelInfo.problem_type): a
single-label classifier's probabilities (a softmax; the top one is the label), a multi-label
classifier's probability per label against that label's threshold (the labels at or over it
are assigned), a regression model's value. For people (rich renderables) and for `--json`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from attnserve.service.client.messages import MULTI_LABEL, REGRESSION, SINGLE_LABEL, TextResult
from attnserve.service.client.windows import windows_document
from attnserve.service.common.model_info import ModelInfo

NONE_ASSIGNED = "no label over its threshold"


@dataclass(frozen=True)
class Scoring:
    """A model's problem type and, for multi-label models, one threshold per label."""

    problem_type: str = SINGLE_LABEL
    thresholds: Sequence[float] = ()

    @classmethod
    def of(cls, info: ModelInfo) -> Scoring:
        return cls(info.problem_type or SINGLE_LABEL, tuple(info.thresholds))

    @property
    def multi(self) -> bool:
        return self.problem_type == MULTI_LABEL

    @property
    def regression(self) -> bool:
        return self.problem_type == REGRESSION


SINGLE = Scoring()


def scores_view(result: TextResult, labels: Sequence[str], scoring: Scoring = SINGLE) -> list[RenderableType]:
    """A regression's value; a multi-label result's labels in order, each probability beside
    its threshold, the assigned ones marked; else the labels by probability, the top in bold."""
    if result.value is not None or scoring.regression:
        value = "-" if result.value is None else f"{result.value:.4f}"
        return [Text(f"value: {value}")]
    table = Table(show_edge=False)
    table.add_column("label")
    table.add_column("probability", justify="right")
    if not scoring.multi:
        for label_id in np.argsort(-result.probabilities):
            style = "bold" if label_id == result.label_id else ""
            table.add_row(Text(labels[label_id], style=style), f"{result.probabilities[label_id]:.4f}")
        return [table]
    table.add_column("threshold", justify="right")
    table.add_column("assigned")
    chosen = set(result.assigned)
    cuts = [f"{t:.4f}" for t in scoring.thresholds] if len(scoring.thresholds) == len(labels) else []
    for i, (name, p) in enumerate(zip(labels, result.probabilities.tolist(), strict=True)):
        on = name in chosen
        cut = cuts[i] if cuts else "-"
        table.add_row(Text(name, style="bold" if on else ""), f"{p:.4f}", cut, "yes" if on else "")
    line = "assigned: " + ", ".join(result.assigned) if result.assigned else NONE_ASSIGNED
    return [table, Text(line)]


def explained(result: TextResult, scoring: Scoring, label: str = "") -> str:
    """The score an attribution explains: a regression's value, else the probability of the
    asked label (`label`) or of the text's own."""
    return "the value" if scoring.regression else f"p({label or result.label})"


def result_document(text: str, result: TextResult, scoring: Scoring = SINGLE) -> dict[str, Any]:
    """One result as `attnserve-client classify --json` prints it."""
    return {
        "text": text,
        "label": result.label,
        "label_id": result.label_id,
        "probabilities": result.probabilities.tolist(),
        **({"assigned": list(result.assigned)} if scoring.multi else {}),  # possibly none
        **({"value": result.value} if result.value is not None else {}),  # regression
        "tokens": result.tokens,
        "truncated": result.truncated,
        "attention": None if result.attention is None else result.attention.tolist(),
        "top_tokens": [{"token": t.token, "index": t.index, "weight": t.weight} for t in result.top_tokens],
        **({"answered_by": result.answered_by} if result.answered_by else {}),  # a cascade's member
        **(
            {"attribution": result.attribution.tolist(), "attribution_rows": result.attribution_rows}
            if result.attribution is not None
            else {}
        ),
        **windows_document(result),  # read as windows (one where the text fits)
    }


def problem_text(info: ModelInfo) -> str:
    """The models table's cell: "single-label", "regression", or "multi-label: a>=0.5, b>=0.4"."""
    scoring = Scoring.of(info)
    if scoring.regression:
        return "regression"
    if not scoring.multi:
        return "single-label" if scoring.problem_type == SINGLE_LABEL else scoring.problem_type
    cuts = ", ".join(f"{name}>={t:.4g}" for name, t in zip(info.labels, scoring.thresholds, strict=False))
    return f"multi-label: {cuts}"
