"""Augmentations: a distractor sentence in front of each text, and [UNK] word dropout."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Collection, Sequence

import numpy as np
import numpy.typing as npt

from attnserve.training.data.core import DataError, Dataset, Example


def add_distractor_prefix(examples: Sequence[Example], rng: random.Random) -> list[Example]:
    """Put a randomly chosen other sentence of ``examples`` in front of each one.

    The label and group stay those of the original sentence, so a model must learn to look
    at the right part of the text. Prefixes come from the same split, so no text leaks
    across splits.
    """
    texts = [ex.text for ex in examples]
    if len(set(texts)) < 2:
        raise DataError(f"a distractor prefix needs at least 2 different texts, got {len(set(texts))}")
    out = []
    for ex in examples:
        other = ex.text
        while other == ex.text:  # terminates: at least one other text exists
            other = texts[rng.randrange(len(texts))]
        out.append(dataclasses.replace(ex, text=f"{other} {ex.text}"))
    return out


def with_distractor_prefix(ds: Dataset, seed: int) -> Dataset:
    """``ds`` with every text of every split prefixed by another text of the same split."""
    rng = random.Random(f"distractor/{seed}")
    splits = {name: add_distractor_prefix(v, rng) if v else v for name, v in ds.splits().items()}
    return dataclasses.replace(
        ds,
        name=f"{ds.name}+distractor",
        train=splits.pop("train"),
        val=splits.pop("val"),
        test=splits.pop("test"),
        extra=splits,
    )


def word_dropout(
    input_ids: npt.ArrayLike,
    attention_mask: npt.ArrayLike,
    p: float,
    unk_id: int,
    rng: np.random.Generator,
    *,
    keep_ids: Collection[int] = (),
) -> npt.NDArray[np.int64]:
    """Return a copy of ``input_ids`` where each real token becomes ``unk_id`` with probability ``p``.

    Padding (mask 0) and the ids in ``keep_ids`` (e.g. ``[CLS]``) are never replaced. Training
    with this teaches a model that words it never saw are normal input, not noise.
    """
    if not 0.0 <= p < 1.0:
        raise ValueError(f"word dropout probability must be in [0, 1), got {p}")
    ids = np.array(input_ids, dtype=np.int64)  # [B, T], a copy
    mask = np.asarray(attention_mask)  # [B, T]
    if ids.shape != mask.shape:
        raise ValueError(f"input_ids {ids.shape} and attention_mask {mask.shape} differ in shape")
    drop = (rng.random(ids.shape) < p) & (mask != 0)  # [B, T]
    if keep_ids:
        drop &= ~np.isin(ids, np.fromiter(keep_ids, dtype=np.int64))
    ids[drop] = unk_id
    return ids
