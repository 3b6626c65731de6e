"""ERASER's faithfulness metrics (DeYoung et al., 2020) at the word level: comprehensiveness (the
predicted class's probability lost without a method's top k % words) and sufficiency (lost with
only them), at each k in KS and their mean (AOPC), scored by the bundle's model.onnx."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attnserve.service.bundle.calibration import softmax
from attnserve.service.engine.models.runtime import pad_ids
from attnserve.service.engine.request.attribution import without

KS = (1, 5, 10, 20, 50)  # percent of a text's words
BATCH = 64  # rows per onnxruntime run when scoring


@dataclass
class Text:
    text: str
    ids: np.ndarray  # [n] as the server encodes it
    units: list[list[int]]  # token positions per word


@dataclass
class Method:
    """One explanation method over the texts: per text its word scores, cost and rows."""

    name: str
    scores: list[np.ndarray] = field(default_factory=list)  # [m] per text
    ms: list[float] = field(default_factory=list)
    rows: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class Row:
    method: str
    comprehensiveness: float  # AOPC
    sufficiency: float  # AOPC, lower is better
    comprehensiveness_at: list[float]  # per k in KS
    sufficiency_at: list[float]
    ms: float | None  # per explanation (None: not measured)
    forward_rows: float | None


def per_word(tokens: np.ndarray, units: list[list[int]]) -> np.ndarray:
    return np.array([float(tokens[unit].sum()) for unit in units])


def probabilities(session: Any, rows: list[np.ndarray], pad_id: int) -> np.ndarray:
    """[R, C] class probabilities of each row, batches of similar length padded on the right."""
    out: np.ndarray = np.zeros((len(rows), 0), dtype=np.float64)
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
    for start in range(0, len(order), BATCH):
        chosen = order[start : start + BATCH]
        ids, mask = pad_ids([rows[i] for i in chosen], pad_id)
        logits = session.run(["logits"], {"input_ids": ids, "attention_mask": mask})[0]
        if out.shape[1] == 0:
            out = np.zeros((len(rows), logits.shape[1]))
        out[chosen] = softmax(logits)
    return out


def faithfulness(
    session: Any, texts: list[Text], full: np.ndarray, classes: np.ndarray, methods: list[Method],
    filler: int, pad_id: int,
) -> list[Row]:  # fmt: skip
    """Every method's comprehensiveness and sufficiency per k, one scoring pass over distinct rows."""
    index: dict[bytes, int] = {}
    rows: list[np.ndarray] = []
    # [method, text, k, 2] positions in `rows` of (without the top words, only the top words)
    where = np.zeros((len(methods), len(texts), len(KS), 2), dtype=np.int64)
    for t, text in enumerate(texts):
        m = len(text.units)
        for i, method in enumerate(methods):
            order = np.argsort(-method.scores[t], kind="stable")
            for j, k in enumerate(KS):
                top = np.zeros(m, dtype=bool)
                top[order[: min(m, max(1, math.ceil(k * m / 100)))]] = True
                for side, keep in enumerate((~top, top)):
                    row = without(text.ids, text.units, keep, filler)
                    where[i, t, j, side] = index.setdefault(row.tobytes(), len(rows))
                    if where[i, t, j, side] == len(rows):
                        rows.append(row)
    p = probabilities(session, rows, pad_id)
    drop = full[None, :, None, None] - p[where, classes[None, :, None, None]]  # [method, text, k, 2]
    result = []
    for i, method in enumerate(methods):
        comp, suff = drop[i, :, :, 0].mean(axis=0), drop[i, :, :, 1].mean(axis=0)  # [k]
        ms = float(np.mean(method.ms)) if method.ms else None
        forward = float(np.mean(method.rows)) if method.rows else None
        result.append(Row(method.name, float(comp.mean()), float(suff.mean()), comp.tolist(), suff.tolist(),
                          ms, forward))  # fmt: skip
    return result
