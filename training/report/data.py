"""What the data looks like to the model, reported before training instead of found out after.

Each check turns a silent trap into a figure in metrics.json and, past a threshold, a
warning: texts cut at max_len, words that became [UNK], classes too rare to be learnt as
they are. ``auto_max_len`` picks max_len from the training lengths.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from attnserve.training.text.tokenizer import UNK_ID, build_tokenizer

PERCENTILES = (50, 90, 95, 99)
WARN_TRUNCATED = 0.10  # share of training texts cut at max_len
WARN_UNK = 0.02  # share of training tokens that are [UNK] because of the vocabulary cap
WARN_MINORITY = 0.2  # a class below this share of the largest class


@dataclass
class DataReport:
    figures: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # one-line summaries, always shown
    warnings: list[str] = field(default_factory=list)


def auto_max_len(train_lengths: np.ndarray, percentile: float, cap: int) -> int:
    """The ``percentile``-th training length, at most ``cap`` and at least 8 tokens."""
    if not 0 < percentile <= 100:
        raise ValueError(f"max-len percentile must be in (0, 100], got {percentile}")
    if cap < 8:
        raise ValueError(f"max-len cap must be >= 8, got {cap}")
    value = int(np.ceil(np.percentile(train_lengths, percentile)))
    return int(min(max(value, 8), cap))


def length_figures(lengths: np.ndarray, max_len: int) -> dict[str, Any]:
    cut = int((lengths > max_len).sum())
    return {
        "n": int(lengths.size),
        "mean": round(float(lengths.mean()), 1),
        **{f"p{p}": int(np.percentile(lengths, p)) for p in PERCENTILES},
        "max": int(lengths.max()),
        "truncated": cut,
        "truncated_share": round(cut / max(lengths.size, 1), 4),
    }


def check_lengths(
    report: DataReport, lengths: dict[str, np.ndarray], max_len: int, truncation: str, how: str
) -> None:
    """Length distribution per split and the share each loses at ``max_len``."""
    figures = {split: length_figures(values, max_len) for split, values in lengths.items() if values.size}
    report.figures["lengths"] = figures
    report.figures["max_len"] = max_len
    report.figures["max_len_from"] = how
    report.figures["truncation"] = truncation
    train = figures["train"]
    report.notes.append(
        f"tokens per text (train): mean {train['mean']}, median {train['p50']}, p90 {train['p90']}, "
        f"p95 {train['p95']}, p99 {train['p99']}, max {train['max']}; max_len {max_len} ({how}) cuts "
        + ", ".join(f"{f['truncated_share']:.1%} of {s}" for s, f in figures.items())
        + f", keeping the {truncation}"
    )
    for split, f in figures.items():
        # The splits a run is judged on: a cut text there is a score of a text the model never read.
        if split != "train" and f["truncated"]:
            report.warnings.append(
                f"max_len {max_len} cuts {f['truncated']:,} {split} texts ({f['truncated_share']:.1%} of "
                f"{split}, longest {f['max']} tokens): the {split} figures score texts the model only "
                f"partly read; raise --max-len to {f['max']} or use --max-len auto"
            )
    if train["truncated_share"] > WARN_TRUNCATED:
        report.warnings.append(
            f"max_len {max_len} truncates {train['truncated_share']:.0%} of the training texts "
            f"(95% fit in {train['p95']} tokens): raise --max-len, use --max-len auto, or choose "
            "which part to keep with --truncation head|tail|head+tail"
        )


def check_vocabulary(
    report: DataReport,
    tokenizer: Tokenizer,
    train_texts: Sequence[str],
    encoded: dict[str, tuple[np.ndarray, np.ndarray]],
    vocab_cap: int,
) -> None:
    """Word types in the training texts, how many the tokenizer turns into [UNK], [UNK] shares."""
    everything = build_tokenizer(train_texts)  # uncapped, min_frequency 1: every word type
    types = [w for w, i in everything.get_vocab().items() if i > UNK_ID]
    unk_types = sum(UNK_ID in e.ids for e in tokenizer.encode_batch(types, add_special_tokens=False))
    shares = {  # encoded: (ids [N, T], real tokens per row [N]) by split
        split: round(float((ids == UNK_ID).sum()) / max(float(lengths.sum()), 1.0), 4)
        for split, (ids, lengths) in encoded.items()
        if ids.size
    }
    report.figures["vocabulary"] = {
        "size": tokenizer.get_vocab_size(),
        "cap": vocab_cap,
        "word_types_in_train": len(types),
        "word_types_unk": unk_types,
        "unk_token_share": shares,
    }
    report.notes.append(
        f"vocabulary {tokenizer.get_vocab_size():,} entries for {len(types):,} word types in training "
        f"({unk_types:,} types become [UNK]); [UNK] share of tokens: "
        + ", ".join(f"{s} {v:.2%}" for s, v in shares.items())
    )
    if unk_types and shares.get("train", 0.0) > WARN_UNK:
        report.warnings.append(
            f"{unk_types:,} word types ({shares['train']:.1%} of training tokens) become [UNK] "
            f"(--vocab-size {vocab_cap}, --min-frequency): raise --vocab-size or use 0 for every word"
        )


def check_classes(
    report: DataReport, labels: Sequence[str], train_ids: Sequence[int], weighted: bool
) -> None:
    counts = Counter(train_ids)
    per_class = {name: counts.get(i, 0) for i, name in enumerate(labels)}
    report.figures["train_classes"] = per_class
    total = max(sum(per_class.values()), 1)
    report.notes.append(
        "training rows per class: " + ", ".join(f"{n} {c} ({c / total:.1%})" for n, c in per_class.items())
    )
    largest = max(per_class.values())
    rare = [n for n, c in per_class.items() if c < WARN_MINORITY * largest]
    if rare and not weighted:
        report.warnings.append(
            f"class(es) {', '.join(repr(n) for n in rare)} have under {WARN_MINORITY:.0%} of the rows of the "
            "largest class: consider --class-weights balanced (selection already uses macro-F1 unless "
            "--select-by says otherwise)"
        )
    missing = [n for n, c in per_class.items() if c == 0]
    if missing:
        report.warnings.append(
            f"class(es) {', '.join(repr(n) for n in missing)} occur only outside the training data: "
            "the model cannot learn them"
        )
