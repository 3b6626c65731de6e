"""A seeded stand-in for a review corpus: long texts, a large vocabulary, a learnable label.

Shaped like Yelp Review Polarity where training cost is concerned: about 133 words a text
with a long tail past 256, about 30,000 word types of Zipf-like frequency, two classes
marked by a few cue words among many neutral ones, and 5% label noise. Nothing is
downloaded; the same seed gives the same corpus.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

SYLLABLES = [c + v for c in "bcdfghjklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ai", "ou")]
MEAN_WORDS = 133
CUES_PER_CLASS = 40
LABEL_NOISE = 0.05


def vocabulary(size: int, rng: np.random.Generator) -> list[str]:
    """``size`` distinct pronounceable pseudo-words of 1-4 syllables."""
    words: dict[str, None] = {}
    while len(words) < size:
        count = int(rng.integers(1, 5))
        words["".join(SYLLABLES[i] for i in rng.integers(0, len(SYLLABLES), count))] = None
    return list(words)


def long_texts(rows: int, seed: int = 0, vocab: int = 30_000) -> tuple[list[str], list[int]]:
    """``rows`` texts and their 0/1 labels."""
    rng = np.random.default_rng(seed)
    words = np.array(vocabulary(vocab, rng), dtype=object)  # the first 2 x CUES_PER_CLASS are cues
    cues = 2 * CUES_PER_CLASS
    cdf = np.cumsum(1.0 / np.arange(1, vocab - cues + 1) ** 1.05)  # Zipf over the neutral words
    # Gamma lengths: mean MEAN_WORDS, about 5% past 256 words, a few past 400.
    lengths = np.clip(rng.gamma(3.0, MEAN_WORDS / 3.0, size=rows).round(), 8, 1000).astype(np.int64)
    starts = np.r_[0, np.cumsum(lengths)[:-1]]
    ids = cues + np.searchsorted(cdf, rng.random(int(lengths.sum())) * cdf[-1]).astype(np.int32)
    labels = rng.integers(0, 2, size=rows)
    n_cues = np.maximum(lengths // 40, 1)  # one cue word in 40, at random places
    row = np.repeat(np.arange(rows), n_cues)
    where = starts[row] + (rng.random(len(row)) * lengths[row]).astype(np.int64)
    ids[where] = labels[row] * CUES_PER_CLASS + rng.integers(0, CUES_PER_CLASS, len(row))
    texts = [" ".join(words[ids[a : a + n]]) for a, n in zip(starts, lengths, strict=True)]
    flipped = rng.random(rows) < LABEL_NOISE
    return texts, np.where(flipped, 1 - labels, labels).tolist()


def write_jsonl(path: Path, rows: int, seed: int = 0) -> Path:
    texts, labels = long_texts(rows, seed)
    with open(path, "w") as fh:
        for text, label in zip(texts, labels, strict=True):
            fh.write(json.dumps({"text": text, "label": label}) + "\n")
    return path
