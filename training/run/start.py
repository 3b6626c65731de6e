"""Where a run starts from: a tokenizer learnt on its texts and a model built from scratch, or a
pretrained checkpoint's own tokenizer and weights. The family decides which (``Family.tokenizer_source``).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from tokenizers import Tokenizer

from attnserve.training.data.spec import DataSpec
from attnserve.training.loop import distributed
from attnserve.training.models import build_model
from attnserve.training.models.base import Classifier
from attnserve.training.models.families import Checkpoint, Family
from attnserve.training.report.data import DataReport, check_vocabulary
from attnserve.training.text.embeddings import EmbeddingInit, apply_embeddings, load_vectors
from attnserve.training.text.tokenizer import build_tokenizer, load_tokenizer, save_tokenizer

Encoded = dict[str, tuple[np.ndarray, np.ndarray]]  # split -> (ids [N, T], lengths [N])


class Start(Protocol):
    @property
    def label(self) -> str: ...  # metrics.json's "tokenizer"

    @property
    def max_positions(self) -> int | None: ...  # the longest input the model can take; None: any

    def tokenizer(self, texts: list[str]) -> Tokenizer: ...

    def check(self, report: DataReport, tok: Tokenizer, texts: list[str], encoded: Encoded) -> None: ...

    def save(self, tok: Tokenizer, path: Path, max_len: int, truncation: str) -> None: ...

    def build(
        self, family: str, num_classes: int, max_len: int, overrides: dict[str, Any], tok: Tokenizer
    ) -> tuple[Classifier, dict[str, Any]]: ...

    def reload(self, path: Path) -> Tokenizer: ...


def start_for(
    family: Family,
    pretrained: str | None,
    spec: DataSpec,
    *,
    add_cls: bool,
    at: distributed.Ranks,
    embeddings: EmbeddingInit | None,
) -> Start:
    """The family's start, checked before any data is read."""
    checkpoint = family.tokenizer_source(pretrained)
    if checkpoint is None:
        return Learnt(spec, add_cls, at, embeddings)
    return FromCheckpoint(checkpoint)


@dataclass
class Learnt:
    """A tokenizer learnt on the training texts; under torchrun rank 0 learns it and sends it,
    so every rank encodes with the same vocabulary."""

    spec: DataSpec
    add_cls: bool
    at: distributed.Ranks
    embeddings: EmbeddingInit | None = None  # --init-embeddings
    max_positions: int | None = None

    @property
    def label(self) -> str:
        return self.spec.tokenizer

    def tokenizer(self, texts: list[str]) -> Tokenizer:
        spec = self.spec

        def built() -> Tokenizer:
            return build_tokenizer(texts, kind=spec.tokenizer, min_frequency=spec.min_frequency,
                                   add_cls=self.add_cls, vocab_size=spec.vocab_size)  # fmt: skip

        if self.at.world == 1:
            return built()
        return Tokenizer.from_str(distributed.from_rank_0(lambda: built().to_str(), self.at))

    def check(self, report: DataReport, tok: Tokenizer, texts: list[str], encoded: Encoded) -> None:
        check_vocabulary(report, tok, texts, encoded, self.spec.vocab_size)

    def save(self, tok: Tokenizer, path: Path, max_len: int, truncation: str) -> None:
        save_tokenizer(tok, path, max_len=max_len, truncation=truncation)

    def build(
        self, family: str, num_classes: int, max_len: int, overrides: dict[str, Any], tok: Tokenizer
    ) -> tuple[Classifier, dict[str, Any]]:
        """The model, and what the word vectors covered (empty without them)."""
        cfg = {"vocab_size": tok.get_vocab_size(), "num_classes": num_classes, **overrides}
        cfg["max_len"] = max_len
        if self.embeddings is None:
            return build_model(family, cfg), {}
        vectors = load_vectors(self.embeddings.path)
        cfg.setdefault("d_model", vectors.vector_size)  # the vectors' width unless --d-model says so
        model = build_model(family, cfg)
        return model, {"embeddings": apply_embeddings(model, vectors, tok, self.embeddings.freeze)}

    def reload(self, path: Path) -> Tokenizer:
        return load_tokenizer(path)


@dataclass
class FromCheckpoint:
    """A pretrained checkpoint: its tokenizer, copied byte for byte, and its weights."""

    checkpoint: Checkpoint

    @property
    def label(self) -> str:
        return f"pretrained: {self.checkpoint.source}"

    @property
    def max_positions(self) -> int | None:
        return self.checkpoint.max_positions

    def tokenizer(self, texts: list[str]) -> Tokenizer:
        return self.checkpoint.tokenizer

    def check(self, report: DataReport, tok: Tokenizer, texts: list[str], encoded: Encoded) -> None:
        """Nothing: a pretrained vocabulary was not built from these texts."""

    def save(self, tok: Tokenizer, path: Path, max_len: int, truncation: str) -> None:
        shutil.copyfile(self.checkpoint.tokenizer_path, path)

    def build(
        self, family: str, num_classes: int, max_len: int, overrides: dict[str, Any], tok: Tokenizer
    ) -> tuple[Classifier, dict[str, Any]]:
        return self.checkpoint.build(num_classes=num_classes, max_len=max_len, **overrides), {}

    def reload(self, path: Path) -> Tokenizer:
        return self.checkpoint.tokenizer
