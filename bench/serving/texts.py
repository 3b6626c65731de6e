"""Texts and prepared requests for the benchmarks: the load test's length mix (loadtest/workload.py:
short, medium, long and over-length sentences), texts of an exact token length, or a CSV column."""

from __future__ import annotations

import csv
import itertools
from collections.abc import Sequence
from pathlib import Path

from tokenizers import Tokenizer

from kit.load import Requests
from loadtest.protocol import NativeProtocol, V2Protocol, WireProtocol
from loadtest.workload import Call, Mix, ModelLimits, Workload


def mixed_texts(count: int, max_len: int, seed: int = 0) -> list[str]:
    workload = Workload(Mix(), ModelLimits(max_len=max_len), (), seed=seed)
    return [workload.random_text() for _ in range(count)]


def csv_texts(path: Path, column: str, count: int | None = None) -> list[str]:
    """The first `count` (default: all) texts of a CSV file's `column`, in file order."""
    with path.open(newline="", encoding="utf-8") as handle:
        return [row[column] for row in itertools.islice(csv.DictReader(handle), count)]


def exact_length_texts(tokenizer_path: Path, length: int, count: int, seed: int = 0) -> list[str]:
    """`count` texts of exactly `length` tokens (special tokens included) under this tokenizer."""
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    tokenizer.no_truncation()
    workload = Workload(Mix(), ModelLimits(max_len=max(length, 8)), (), seed=seed)
    extra = len(tokenizer.encode("car").ids) - 1  # tokens the post-processor adds ([CLS] ...)
    texts = []
    for _ in range(count):
        words = max(1, length - extra)
        text = workload.corpus.sentence(words)
        while len(tokenizer.encode(text).ids) > length and words > 1:  # a word split into pieces
            words -= 1
            text = workload.corpus.sentence(words)
        texts.append(text)
    if (got := {len(tokenizer.encode(text).ids) for text in texts}) != {length}:
        raise ValueError(
            f"cannot build texts of exactly {length} tokens with this tokenizer (got {sorted(got)})"
        )
    return texts


def prepared(api: str, model: str, texts: Sequence[str], texts_per_request: int, attention: bool) -> Requests:
    """64 requests of `texts_per_request` texts each, taken in turn from `texts`; replies checked."""
    limits = ModelLimits(max_len=10**6)
    protocol: WireProtocol = NativeProtocol(model, limits) if api == "native" else V2Protocol(model, limits)
    chosen = [[texts[(i * texts_per_request + j) % len(texts)] for j in range(texts_per_request)]
              for i in range(64)]  # fmt: skip
    calls = [Call("bench", tuple(group), attention, None) for group in chosen]
    bodies = [protocol.prepare(call).body for call in calls]
    return Requests(protocol.method, bodies, texts_per_request, lambda reply: protocol.check(calls[0], reply))
