"""A model's windows read back into one answer per text, as the server folds them.

Every window runs alone through the PyTorch model (batches of similar length, padded as the
server pads them); `fold` then reads each text three ways: its first window alone (what a
server without `--long-text windows` answers: the text cut at the window), and the server's
own `combined` under mean and max (service/engine/request/windows.py), so the figures that
choose the policy are the served answers, not a re-implementation of them.
"""

from __future__ import annotations

import numpy as np
import torch

from attnserve.service.bundle import LongTexts, Scoring, softmax
from attnserve.service.engine.request.windows import combined
from attnserve.training.document.head import TRUNCATE
from attnserve.training.long_texts.windows import Documents
from attnserve.training.models.base import Classifier
from attnserve.training.report.metrics import Scores, score

READINGS = (TRUNCATE, "mean", "max")  # a text's first window, then the policy's combinations
_SINGLE_LABEL = Scoring()


@torch.no_grad()
def window_logits(model: Classifier, docs: Documents, device: torch.device, max_tokens: int) -> np.ndarray:
    """[R, C] float32: every window's logits, each window padded only to its batch's longest."""
    model.eval()
    out = np.zeros((len(docs.lengths), int(model.config.num_classes)), np.float32)
    order = np.argsort(docs.lengths, kind="stable")
    start = 0
    while start < len(order):
        stop = start + 1  # grow the batch while its padded tokens stay within max_tokens
        while stop < len(order) and (stop + 1 - start) * int(docs.lengths[order[stop]]) <= max_tokens:
            stop += 1
        rows = order[start:stop]
        width = int(docs.lengths[rows].max())
        ids = torch.from_numpy(docs.ids[rows, :width].astype(np.int64)).to(device)
        mask = (torch.arange(width)[None, :] < torch.from_numpy(docs.lengths[rows])[:, None]).long()
        out[rows] = model.logits(ids, mask.to(device)).float().cpu().numpy()
        start = stop
    return out


def fold(logits: np.ndarray, docs: Documents, policy: LongTexts) -> dict[str, np.ndarray]:
    """Per reading (truncate, mean, max) the texts' logits [N, C] from their windows' [R, C]."""
    starts = docs.starts
    out = {TRUNCATE: logits[starts]}
    for combine in READINGS[1:]:
        each = policy.model_copy(update={"combine": combine, "head": None})
        rows = [
            combined(logits[s : s + n], each, _SINGLE_LABEL) for s, n in zip(starts, docs.counts, strict=True)
        ]
        out[combine] = np.stack(rows) if rows else np.zeros((0, logits.shape[1]), np.float32)
    return out


def scores(logits: np.ndarray, labels: np.ndarray) -> Scores:
    """The text-level scores of logits [N, C]: accuracy, macro-F1, cross-entropy, calibration."""
    probs = softmax(logits)
    loss = float(-np.log(np.maximum(probs[np.arange(len(labels)), labels], 1e-12)).mean())
    return score(labels, probs, loss)


def readings(
    model: Classifier, docs: Documents, policy: LongTexts, device: torch.device, max_tokens: int
) -> tuple[dict[str, Scores], dict[str, np.ndarray]]:
    """Each reading's scores on `docs` and its texts' logits (both empty when no text is left)."""
    if not len(docs):
        return {}, {}
    folded = fold(window_logits(model, docs, device, max_tokens), docs, policy)
    return {name: scores(z, docs.labels) for name, z in folded.items()}, folded


def choose(figures: dict[str, float]) -> str:
    """The combination a policy records: the better of mean and max on validation (mean on a tie,
    as trained). Truncation is the baseline beside them: a policy always reads every window."""
    return "max" if figures["max"] > figures["mean"] else "mean"
