"""The ceiling: raw onnxruntime in this process on the same bundle and length mix, no gRPC.

Texts sorted by length in batches (length bucketing's best case), run back to back per
(threads, batch size) without, with tokenization and with the attention output fetched.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from attnserve.service.bundle import Bundle


@dataclass(frozen=True)
class CeilingRow:
    threads: int
    batch: int
    excluded: float  # texts/s, tokenization excluded
    included: float  # texts/s, tokenization included
    attention: float  # texts/s, tokenization excluded, attention output fetched


def session_for(bundle: Bundle, threads: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(bundle.model_path), options, providers=["CPUExecutionProvider"])


def tokenizer_for(bundle: Bundle, pad_to: int | None = None) -> Tokenizer:
    """The bundle's tokenizer, truncating at max_len and padding to a batch's longest (or `pad_to`)."""
    tokenizer = Tokenizer.from_file(str(bundle.tokenizer_path))
    tokenizer.enable_truncation(max_length=bundle.manifest.max_len)
    tokenizer.enable_padding(pad_id=bundle.manifest.pad_id, length=pad_to)
    return tokenizer


def encode(tokenizer: Tokenizer, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    encodings = tokenizer.encode_batch(list(texts))
    ids = np.asarray([e.ids for e in encodings], dtype=np.int64)  # [B, T]
    mask = np.asarray([e.attention_mask for e in encodings], dtype=np.int64)  # [B, T]
    return ids, mask


def rate(work: Callable[[int], int], seconds: float) -> float:
    """Texts per second of `work(i)` (returns texts done) run back to back for `seconds`."""
    work(0)  # warm-up: first-run allocations stay out of the figure
    done, i, started = 0, 0, time.perf_counter()
    while True:
        done, i = done + work(i), i + 1
        if (elapsed := time.perf_counter() - started) >= seconds:
            return done / elapsed


def sorted_batches(tokenizer: Tokenizer, texts: Sequence[str], batch: int) -> list[list[str]]:
    lengths = [sum(e.attention_mask) for e in tokenizer.encode_batch(list(texts))]  # real tokens, not padding
    ordered = [text for _, text in sorted(zip(lengths, texts, strict=True), key=lambda pair: pair[0])]
    return [ordered[i : i + batch] for i in range(0, len(ordered) - batch + 1, batch)]


Feed = tuple[np.ndarray, np.ndarray]  # input_ids, attention_mask: [B, T] each


def run_feeds(session: ort.InferenceSession, feeds: Sequence[Feed], names: list[str]) -> Callable[[int], int]:
    def work(i: int) -> int:
        ids, mask = feeds[i % len(feeds)]
        session.run(names, {"input_ids": ids, "attention_mask": mask})
        return len(ids)

    return work


def run_texts(
    session: ort.InferenceSession, tokenizer: Tokenizer, groups: Sequence[Sequence[str]]
) -> Callable[[int], int]:
    def work(i: int) -> int:
        group = groups[i % len(groups)]
        ids, mask = encode(tokenizer, group)
        session.run(["logits"], {"input_ids": ids, "attention_mask": mask})
        return len(group)

    return work


def measure(
    bundle: Bundle, texts: Sequence[str], batch_sizes: Sequence[int], threads: Sequence[int], seconds: float
) -> list[CeilingRow]:
    tokenizer = tokenizer_for(bundle)
    has_attention = bundle.manifest.attention.kind != "none"
    rows = []
    for thread_count in threads:
        session = session_for(bundle, thread_count)
        for batch in batch_sizes:
            groups = sorted_batches(tokenizer, texts, batch)
            feeds = [encode(tokenizer, group) for group in groups]
            excluded = rate(run_feeds(session, feeds, ["logits"]), seconds)
            included = rate(run_texts(session, tokenizer, groups), seconds)
            attention = (
                rate(run_feeds(session, feeds, ["logits", "attention"]), seconds) if has_attention else 0.0
            )
            rows.append(CeilingRow(thread_count, batch, excluded, included, attention))
    return rows


def padding_rows(
    bundle: Bundle, texts: Sequence[str], batch: int, seconds: float, threads: int = 1
) -> dict[str, float]:
    """Texts/s of the same mixed-length stream in batches of `batch`, three ways: sorted by
    length (bucketing), in arrival order padded to each batch's longest, padded to max_len."""
    tokenizer = tokenizer_for(bundle)
    session = session_for(bundle, threads)
    arrival = [list(texts[i : i + batch]) for i in range(0, len(texts) - batch + 1, batch)]
    fixed = tokenizer_for(bundle, pad_to=bundle.manifest.max_len)
    plans = {
        "length buckets": [encode(tokenizer, g) for g in sorted_batches(tokenizer, texts, batch)],
        "arrival order, pad to batch's longest": [encode(tokenizer, g) for g in arrival],
        "pad every batch to max_len": [encode(fixed, g) for g in arrival],
    }
    return {name: rate(run_feeds(session, feeds, ["logits"]), seconds) for name, feeds in plans.items()}


def length_curve(
    bundle: Bundle, texts_by_length: dict[int, list[str]], batch: int, seconds: float, threads: int = 1
) -> dict[int, float]:
    """Texts/s at batch `batch` when every text has exactly T tokens, for each T."""
    tokenizer = tokenizer_for(bundle)
    session = session_for(bundle, threads)
    return {
        length: rate(run_feeds(session, [encode(tokenizer, (texts * batch)[:batch])], ["logits"]), seconds)
        for length, texts in texts_by_length.items()
    }


def bundle_dir(repository: Path, model: str) -> Path:
    """The latest version folder of `model` in `repository`."""
    versions = sorted(
        (p for p in (repository / model).iterdir() if p.name.isdigit()), key=lambda p: int(p.name)
    )
    if not versions:
        raise FileNotFoundError(f"{repository / model} holds no version folder")
    return versions[-1]
