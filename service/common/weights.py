"""One number per token from a reply's attention, whatever its mode: what the explorer, the
client's renderings and the engine's top tokens rank by."""

from __future__ import annotations

import numpy as np


def importance(weights: np.ndarray) -> np.ndarray:
    """Per-token weight [n] from any mode's array: a vector as is; matrices averaged over
    heads and query rows (the attention each token receives), summing to 1."""
    if weights.ndim == 1:
        return weights
    while weights.ndim > 2:
        weights = weights[-1] if weights.ndim == 4 else weights.mean(axis=0)
    return np.asarray(weights.mean(axis=0))
