"""The temperature of a bundle that reads long texts as windows: fitted on the validation texts'
combined logits, the answers a server with `--long-text windows` gives, rather than on each
text cut at max_len (whose first window alone may say little about a long text).

Each text is cut by the server's tokenizer class with the bundle's policy, every window runs
through model.onnx padded as the server pads it, and the windows fold with the server's own
`combined`. A text over the policy's `max_windows` is left out, as a server refuses it.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnxruntime as ort

from attnserve.export.calibration import CalibrationError, RowsName, calibrate
from attnserve.export.evalset import EvalSet
from attnserve.service.bundle import MODEL_FILE, Calibration, LongTexts, Scoring, Truncation
from attnserve.service.engine.models.runtime import pad_ids
from attnserve.service.engine.request.windows import combined
from attnserve.training.long_texts.windows import cut_texts, window_tokenizer

log = logging.getLogger(__name__)
RUN_BATCH = 64  # windows per graph run


def window_calibration(
    session: ort.InferenceSession,
    tokenizer_path: Path,
    rows: EvalSet,
    named: RowsName,
    max_len: int,
    truncation: Truncation | None,
    policy: LongTexts,
    pad_id: int,
) -> Calibration | None:
    """T fitted on the texts' combined logits, or None with a warning where none can be fitted."""
    if rows.multi_label:
        log.warning("no temperature fitted: the rows hold several labels each (multi-label)")
        return None
    cutter = window_tokenizer(tokenizer_path, max_len, truncation or "head", policy)
    cut = cut_texts(cutter, rows.texts)
    kept = [i for i, each in enumerate(cut) if each is not None and len(each) <= policy.max_windows]
    windows = [window for i in kept for window in (cut[i] or [])]
    if not kept:
        log.warning("no temperature fitted: no validation text fits %d windows", policy.max_windows)
        return None
    logits = _graph_logits(session, windows, pad_id)
    scoring, texts, start = Scoring(), [], 0
    for i in kept:
        count = len(cut[i] or [])
        texts.append(combined(logits[start : start + count], policy, scoring))
        start += count
    try:
        calibration = calibrate(np.stack(texts), rows.labels[kept], named, MODEL_FILE)
    except CalibrationError as exc:
        log.warning(
            "no temperature fitted on %s's windows; probabilities are served at T = 1: %s", named.file, exc
        )
        return None
    log.info("temperature %.4f on %d texts of %s read as windows (%s): ECE %.4f -> %.4f",
             calibration.temperature, len(kept), named.file, policy.combine, calibration.ece_before,
             calibration.ece_after)  # fmt: skip
    return calibration


def _graph_logits(session: ort.InferenceSession, windows: list[list[int]], pad_id: int) -> np.ndarray:
    """[R, C] the graph's logits of each window, batches of similar length."""
    order = sorted(range(len(windows)), key=lambda i: len(windows[i]))
    out: np.ndarray | None = None
    for start in range(0, len(order), RUN_BATCH):
        picked = order[start : start + RUN_BATCH]
        ids, mask = pad_ids([windows[i] for i in picked], pad_id)
        (logits,) = session.run(["logits"], {"input_ids": ids, "attention_mask": mask})
        if out is None:
            out = np.zeros((len(windows), logits.shape[1]), np.float32)
        out[picked] = logits
    assert out is not None
    return out
