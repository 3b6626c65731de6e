"""Raw onnxruntime in this process on the served bundle, no gRPC: the ceiling (texts sorted by
length in batches, length bucketing's best case, without and with tokenization and with the
attention output), the text-length curves, and the model's own CPU per text."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from attnserve.service.bundle import Bundle, read_bundle
from attnserve.service.common.vocabulary import AttentionKind
from bench.sections import Refused

Feed = tuple[np.ndarray, np.ndarray]  # input_ids, attention_mask: [B, T] each
MODEL_CPU_SECONDS = 0.3


@dataclass(frozen=True)
class CeilingRow:
    threads: int
    batch: int
    excluded: float  # texts/s, tokenization excluded
    included: float  # texts/s, tokenization included
    attention: float  # texts/s, tokenization excluded, attention output fetched


def bundle_dir(repository: Path, model: str) -> Path:
    """The latest version folder of `model` in `repository`."""
    folder = repository / model
    versions = [int(p.name) for p in folder.iterdir() if p.name.isdigit()] if folder.is_dir() else []
    if not versions:
        raise Refused(f"no model {model!r} in {repository}; train and export one first (`make model`), "
                      "or pass --repository/--model")  # fmt: skip
    return folder / str(max(versions))


def session_for(graph: Path, threads: int, spinning: bool = False) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    return ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])


def tokenizer_for(bundle: Bundle, pad_to: int | None = None) -> Tokenizer:
    """The bundle's tokenizer, truncating at max_len and padding to a batch's longest (or `pad_to`)."""
    tokenizer = Tokenizer.from_file(str(bundle.tokenizer_path))
    tokenizer.enable_truncation(max_length=bundle.manifest.max_len)
    tokenizer.enable_padding(pad_id=bundle.manifest.pad_id, length=pad_to)
    return tokenizer


def encode(tokenizer: Tokenizer, texts: Sequence[str]) -> Feed:
    encodings = tokenizer.encode_batch(list(texts))
    ids = np.asarray([e.ids for e in encodings], dtype=np.int64)  # [B, T]
    mask = np.asarray([e.attention_mask for e in encodings], dtype=np.int64)  # [B, T]
    return ids, mask


def rate(
    work: Callable[[int], int], seconds: float, clock: Callable[[], float] = time.perf_counter, least: int = 1
) -> float:
    """Texts per second of `work(i)` (returns texts done) run back to back for `seconds` of
    `clock` and at least `least` times, after one warm-up run."""
    work(0)
    done, i, started = 0, 0, clock()
    while True:
        done, i = done + work(i), i + 1
        if (elapsed := clock() - started) >= seconds and i >= least:
            return done / elapsed


def sorted_batches(tokenizer: Tokenizer, texts: Sequence[str], batch: int) -> list[list[str]]:
    lengths = [sum(e.attention_mask) for e in tokenizer.encode_batch(list(texts))]  # real tokens, not padding
    ordered = [text for _, text in sorted(zip(lengths, texts, strict=True), key=lambda pair: pair[0])]
    return [ordered[i : i + batch] for i in range(0, len(ordered) - batch + 1, batch)]


def runner(
    session: ort.InferenceSession, names: list[str], batches: Sequence[Any],
    prepare: Callable[[Any], Feed] | None = None,
) -> Callable[[int], int]:  # fmt: skip
    """`work(i)` for `rate`: runs batch i (cycling), a feed or what `prepare` makes one of."""

    def work(i: int) -> int:
        ids, mask = batches[i % len(batches)] if prepare is None else prepare(batches[i % len(batches)])
        session.run(names, {"input_ids": ids, "attention_mask": mask})
        return len(ids)

    return work


def measure(
    bundle: Bundle, texts: Sequence[str], batch_sizes: Sequence[int], threads: Sequence[int], seconds: float
) -> list[CeilingRow]:
    tokenizer = tokenizer_for(bundle)
    has_attention = bundle.manifest.attention.kind != AttentionKind.NONE
    rows = []
    for thread_count in threads:
        session = session_for(bundle.model_path, thread_count)
        for batch in batch_sizes:
            groups = sorted_batches(tokenizer, texts, batch)
            feeds = [encode(tokenizer, group) for group in groups]
            excluded = rate(runner(session, ["logits"], feeds), seconds)
            included = rate(runner(session, ["logits"], groups, partial(encode, tokenizer)), seconds)
            fetched = runner(session, ["logits", "attention"], feeds)
            attention = rate(fetched, seconds) if has_attention else 0.0
            rows.append(CeilingRow(thread_count, batch, excluded, included, attention))
    return rows


def padding_rows(bundle: Bundle, texts: Sequence[str], batch: int, seconds: float) -> dict[str, float]:
    """Texts/s of the same mixed-length stream in batches of `batch`, three ways: sorted by
    length (bucketing), in arrival order padded to each batch's longest, padded to max_len."""
    tokenizer, session = tokenizer_for(bundle), session_for(bundle.model_path, 1)
    arrival = [list(texts[i : i + batch]) for i in range(0, len(texts) - batch + 1, batch)]
    fixed = tokenizer_for(bundle, pad_to=bundle.manifest.max_len)
    plans = {
        "length buckets": [encode(tokenizer, g) for g in sorted_batches(tokenizer, texts, batch)],
        "arrival order, pad to batch's longest": [encode(tokenizer, g) for g in arrival],
        "pad every batch to max_len": [encode(fixed, g) for g in arrival],
    }
    return {name: rate(runner(session, ["logits"], feeds), seconds) for name, feeds in plans.items()}


def length_curve(
    bundle: Bundle, by_length: dict[int, list[str]], batch: int, seconds: float
) -> dict[int, float]:
    """Texts/s at batch `batch` when every text has exactly T tokens, for each T."""
    tokenizer, session = tokenizer_for(bundle), session_for(bundle.model_path, 1)
    return {
        length: rate(runner(session, ["logits"], [encode(tokenizer, (texts * batch)[:batch])]), seconds)
        for length, texts in by_length.items()
    }


@cache
def _model(bundle_dir: Path) -> tuple[ort.InferenceSession, Tokenizer, list[str]]:
    bundle = read_bundle(bundle_dir)
    names = ["logits"] if bundle.manifest.attention.kind == AttentionKind.NONE else ["logits", "attention"]
    return session_for(bundle.model_path, 1), tokenizer_for(bundle), names


@cache
def model_cpu_per_text(bundle_dir: Path, texts: tuple[str, ...], batch: int) -> float:
    """CPU seconds (`time.process_time`: a shared machine inflates wall time) of session.run per
    text at `batch` texts a run, one intra-op thread, attention output included; tokenization
    stays in the server's share."""
    session, tokenizer, names = _model(bundle_dir)
    groups = [[texts[(i * batch + j) % len(texts)] for j in range(batch)] for i in range(8)]
    work = runner(session, names, [encode(tokenizer, group) for group in groups])
    return 1 / rate(work, MODEL_CPU_SECONDS, time.process_time)
