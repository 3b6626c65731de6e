"""The bundle's `data_profile`: the exported graph run over the run's validation texts.

The run directory keeps the validation split (`eval.jsonl`), not the training texts, so the
figures the server compares its traffic against are measured there: same source and
tokenizer as training, held out like production traffic, and through the very graph the
bundle ships, its confidences at the bundle's temperature as the server computes them. What
training itself reported about the training split (metrics.json `data`:
rows per class, mean length, truncated share, [UNK] share of tokens) is copied beside them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from pydantic import ValidationError

from attnserve.export.errors import ExportError
from attnserve.export.evalset import EvalSet, load_bundle_tokenizer
from attnserve.service.bundle import DataProfile, TrainingFigures, Truncation, profile_texts, softmax
from attnserve.service.bundle.profile import unknown_ratios
from attnserve.training.text.tokenizer import UNK_TOKEN, encode_batch

SOURCE = "validation split (eval.jsonl) through the exported graph"
CHUNK = 64


def measure_profile(
    session: ort.InferenceSession,
    tokenizer_path: Path,
    eval_set: EvalSet,
    labels: Sequence[str],
    max_len: int,
    truncation: Truncation | None,  # None: the side tokenizer.json saves (bundles that record none)
    metrics: Mapping[str, Any],
    *,
    temperature: float = 1.0,
    source: str = SOURCE,
) -> DataProfile:
    """The profile of ``eval_set`` through ``session``, its confidences at the bundle's
    temperature: the probabilities the server will observe on its traffic."""
    tokenizer = load_bundle_tokenizer(tokenizer_path)
    unk_id = tokenizer.token_to_id(UNK_TOKEN)
    if unk_id is None:
        raise ExportError(f"{tokenizer_path} has no {UNK_TOKEN} token: it is not a training tokenizer")
    order = sorted(range(len(eval_set)), key=lambda i: len(eval_set.texts[i]))  # chunks pad little
    n = len(order)
    probabilities = np.empty((n, len(labels)), dtype=np.float32)
    lengths = np.empty(n, dtype=np.int64)
    unknown = np.empty(n, dtype=np.float64)
    truncated = np.empty(n, dtype=bool)
    for start in range(0, n, CHUNK):
        picked = order[start : start + CHUNK]
        encoded = encode_batch(tokenizer, [eval_set.texts[i] for i in picked], max_len, truncation)
        ids, mask = encoded.input_ids, encoded.attention_mask
        if ids.shape[1] == 0:  # every text normalised to nothing: one padded column keeps shapes valid
            ids = mask = np.zeros((len(picked), 1), dtype=np.int64)
        (logits,) = session.run(["logits"], {"input_ids": ids, "attention_mask": mask})
        probabilities[picked] = softmax(logits, temperature)
        lengths[picked] = encoded.lengths
        unknown[picked] = unknown_ratios(ids, encoded.lengths, unk_id)
        truncated[picked] = encoded.truncated
    return profile_texts(
        source=source,
        labels=labels,
        true_label_ids=eval_set.labels,
        probabilities=probabilities,
        lengths=lengths,
        unknown_ratio=unknown,
        truncated=truncated,
        training=training_figures(metrics, labels),
    )


def training_figures(metrics: Mapping[str, Any], labels: Sequence[str]) -> TrainingFigures | None:
    """The training split's figures from metrics.json's data report; None for runs without one."""
    data = metrics.get("data")
    if not isinstance(data, Mapping):
        return None
    try:
        classes = data.get("train_classes") or {}
        lengths = (data.get("lengths") or {}).get("train") or {}
        unk_share = ((data.get("vocabulary") or {}).get("unk_token_share") or {}).get("train")
        rows = sum(int(classes.get(name, 0)) for name in labels)
        return TrainingFigures(
            texts=int(lengths.get("n", rows)),
            label_shares={name: round(int(classes.get(name, 0)) / rows, 6) for name in labels}
            if rows
            else {},
            tokens_mean=lengths.get("mean"),
            truncated_share=lengths.get("truncated_share"),
            unknown_token_share=unk_share,
        )
    except (ValidationError, TypeError, ValueError, AttributeError) as exc:
        raise ExportError(f"metrics.json's data report is not as training writes it: {exc}") from None
