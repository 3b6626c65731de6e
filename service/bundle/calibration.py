"""Temperature scaling: the probabilities a bundle serves, and what its temperature was fitted on.

A classifier trained on cross-entropy is often sure of itself beyond what its accuracy
warrants (Guo et al. 2017, "On Calibration of Modern Neural Networks"). Dividing the
logits by one temperature T > 0 before the softmax fixes much of that without moving any
label: export fits T on held-out rows (export/calibration.py) and records it in
`bundle.json`'s optional `calibration`; the server's probabilities are then
`softmax(logits / T)`, while the logits it replies with stay the graph's own. A bundle
without the field serves at T = 1, as bundles did before it existed.

Standard library, pydantic and numpy only: part of the torch-free serving install.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

ECE_BINS = 15  # equal-width confidence bins of the expected calibration error, as Guo et al. count them


class Calibration(BaseModel):
    """The temperature the server divides the logits by, and the rows that chose it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: Literal["temperature"] = "temperature"
    temperature: float = Field(gt=0)
    graph: str  # the bundle's graph whose logits T was fitted on, e.g. "model.onnx"
    # The rows: a file (e.g. "eval.jsonl", "dev.csv"), which split or part of it, how many, its sha256.
    file: str
    split: str
    rows: int = Field(ge=1)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    bins: int = Field(default=ECE_BINS, ge=1)
    # On those rows, at T = 1 (before) and at the fitted T (after).
    ece_before: float = Field(ge=0, le=1)
    ece_after: float = Field(ge=0, le=1)
    nll_before: float = Field(ge=0)
    nll_after: float = Field(ge=0)
    confidence_before: float = Field(ge=0, le=1)  # mean top probability
    confidence_after: float = Field(ge=0, le=1)
    accuracy: float = Field(ge=0, le=1)  # a temperature moves no label: one figure


def softmax(logits: npt.NDArray[np.float32], temperature: float = 1.0) -> npt.NDArray[np.float32]:
    """softmax(logits / temperature) over the last axis, in float32.

    The one formula of the server's runner and of every export step that decides on served
    probabilities (a cascade's threshold), so both see the same float32 values.
    """
    if temperature != 1.0:
        logits = logits / np.float32(temperature)
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return np.asarray(shifted / shifted.sum(axis=-1, keepdims=True), dtype=np.float32)
