"""Word vectors from disk as a model's initial embedding (``--init-embeddings FILE``).

Reads word2vec binary, word2vec text (a "count dim" header line) and GloVe text (no header)
through gensim's KeyedVectors. Each vocabulary entry with a vector starts from it, looked up
as written and then lowercased; the rest keep their random start. The embedding is then
fine-tuned with the model, or frozen (``--freeze-embeddings``).
"""

from __future__ import annotations

import gzip
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tokenizers import Tokenizer

from attnserve.training.data.core import DataError
from attnserve.training.models.base import Classifier, SequenceClassifier
from attnserve.training.text.tokenizer import UNK_ID

if TYPE_CHECKING:
    from gensim.models import KeyedVectors

log = logging.getLogger(__name__)
BINARY_SUFFIXES = (".bin", ".bin.gz")


@dataclass(frozen=True)
class EmbeddingInit:
    path: str
    freeze: bool = False


def _has_header(path: Path) -> bool:
    """word2vec text starts with "count dim"; GloVe starts with a word and its numbers."""
    opener: Any = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        first = f.readline().split()
    return len(first) == 2 and all(part.isdigit() for part in first)


def load_vectors(path: str | Path) -> KeyedVectors:
    """The vectors in ``path``: binary by its suffix (.bin), else text, with or without header."""
    from gensim.models import KeyedVectors  # only runs that ask for vectors pay for importing gensim

    p = Path(path)
    if not p.is_file():
        raise DataError(f"--init-embeddings: no such file {p.name!r}")
    binary = p.name.endswith(BINARY_SUFFIXES)
    try:
        if binary:
            return KeyedVectors.load_word2vec_format(str(p), binary=True)
        return KeyedVectors.load_word2vec_format(str(p), binary=False, no_header=not _has_header(p))
    except (ValueError, UnicodeDecodeError, EOFError) as exc:
        kind = "word2vec binary" if binary else "word2vec/GloVe text"
        raise DataError(f"--init-embeddings: {p.name!r} is not {kind} vectors ({exc})") from None


def initial_embedding(
    vectors: KeyedVectors, tokenizer: Tokenizer, width: int
) -> tuple[np.ndarray, np.ndarray]:
    """Rows [V, D] for the vocabulary (zeros where none) and which rows were found [V]."""
    if vectors.vector_size != width:
        raise DataError(
            f"--init-embeddings: the vectors are {vectors.vector_size} wide but the model's embedding is "
            f"{width}: set --d-model {vectors.vector_size} (or leave it unset)"
        )
    vocab = tokenizer.get_vocab()
    rows = np.zeros((tokenizer.get_vocab_size(), width), dtype=np.float32)
    found = np.zeros(tokenizer.get_vocab_size(), dtype=bool)
    for word, index in vocab.items():
        if index <= UNK_ID:  # padding and [UNK] have no word
            continue
        for key in (word, word.lower()):
            if key in vectors.key_to_index:
                rows[index], found[index] = vectors[key], True
                break
    return rows, found


def apply_embeddings(
    model: Classifier, vectors: KeyedVectors, tokenizer: Tokenizer, freeze: bool
) -> dict[str, Any]:
    """Copy the vectors into ``model``'s embedding; return the coverage figures."""
    if not isinstance(model, SequenceClassifier):
        raise DataError(f"--init-embeddings: {model.family} has no token embedding to initialise")
    rows, found = initial_embedding(vectors, tokenizer, int(model.config.d_model))
    with torch.no_grad():
        weight = model.embed.weight
        # Scaled to the random rows' spread, so found and missing words start alike for the layers above.
        spread = float(weight[~torch.from_numpy(found)].std()) if (~found).any() else 1.0
        scale = spread / max(float(rows[found].std()), 1e-8) if found.any() else 1.0
        weight[torch.from_numpy(found)] = torch.from_numpy(rows[found] * scale)
    model.embed.weight.requires_grad_(not freeze)
    words = max(int(tokenizer.get_vocab_size()) - (UNK_ID + 1), 1)
    figures = {
        "vectors": len(vectors.key_to_index),
        "width": int(vectors.vector_size),
        "vocabulary_found": int(found.sum()),
        "vocabulary_coverage": round(float(found.sum()) / words, 4),
        "frozen": freeze,
    }
    log.info(
        "initial embeddings: %s of %s vocabulary entries (%.1f%%) have a vector (%s vectors, %d wide); %s",
        f"{figures['vocabulary_found']:,}", f"{words:,}", 100 * figures["vocabulary_coverage"],
        f"{figures['vectors']:,}", figures["width"], "frozen" if freeze else "fine-tuned",
    )  # fmt: skip
    return figures
