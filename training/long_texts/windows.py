"""Long texts as windows, cut exactly as a server with `--long-text windows` cuts them, and
the steps they are packed into.

The cut is the server's own code: `TextTokenizer.encode_windows` on the run's tokenizer.json
with the run's `LongTexts` (tokenizers' overflow with stride, special tokens per window), so
the windows trained on are the windows served. A text of more windows than `max_windows`
is refused by a server; here it is skipped (and counted), never cut to fit.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnserve.service.bundle import LongTexts
from attnserve.service.engine.models.tokenization import TextTokenizer
from attnserve.service.errors import InvalidArgument

CUT_BATCH = 256  # texts cut at once
_NO_LIMIT = 4096  # LongTexts' most windows: the limit is applied here, by skipping


@dataclass(frozen=True)
class Documents:
    """Texts as windows: `ids` [R, window] right-padded rows, texts' windows consecutive."""

    ids: np.ndarray  # [R, window] int32, padded with pad_id
    lengths: np.ndarray  # [R] tokens of each window
    counts: np.ndarray  # [N] windows of each text
    labels: np.ndarray  # [N] class ids
    skipped: int  # texts left out: over max_windows, or no tokens at all

    @property
    def starts(self) -> np.ndarray:
        """[N] each text's first window row."""
        return np.concatenate([[0], np.cumsum(self.counts)[:-1]]).astype(np.int64)

    def __len__(self) -> int:
        return len(self.counts)


def window_tokenizer(path: Path, max_len: int, truncation: str, policy: LongTexts) -> TextTokenizer:
    """The run's tokenizer as a server loads it, cutting windows with no limit on their count."""
    return TextTokenizer(
        path,
        max_len,
        reject_long=False,
        max_text_chars=sys.maxsize,
        truncation="tail" if truncation == "tail" else "head",
        windows=policy.model_copy(update={"max_windows": _NO_LIMIT}),
    )


def cut_texts(tokenizer: TextTokenizer, texts: Sequence[str]) -> list[list[list[int]] | None]:
    """Per text its windows' token ids (None where it has no tokens)."""
    out: list[list[list[int]] | None] = []
    for start in range(0, len(texts), CUT_BATCH):
        batch = list(texts[start : start + CUT_BATCH])
        try:
            windows, _ = tokenizer.encode_windows(batch)
        except InvalidArgument:  # some text normalises to nothing: cut them one by one
            for text in batch:
                try:
                    out.append([list(e.ids) for e in tokenizer.encode_windows([text])[0][0]])
                except InvalidArgument:
                    out.append(None)
            continue
        out.extend([list(e.ids) for e in each] for each in windows)
    return out


def documents(
    tokenizer: TextTokenizer, texts: Sequence[str], labels: Sequence[int], max_windows: int, pad_id: int
) -> Documents:
    """The texts that a server would read, as windows; the others are counted in `skipped`."""
    kept: list[list[list[int]]] = []
    kept_labels: list[int] = []
    for each, label in zip(cut_texts(tokenizer, texts), labels, strict=True):
        if each is None or len(each) > max_windows:
            continue
        kept.append(each)
        kept_labels.append(label)
    rows = [row for each in kept for row in each]
    width = max((len(row) for row in rows), default=1)
    ids = np.full((len(rows), width), pad_id, np.int32)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
    return Documents(
        ids=ids,
        lengths=np.asarray([len(row) for row in rows], np.int64),
        counts=np.asarray([len(each) for each in kept], np.int64),
        labels=np.asarray(kept_labels, np.int64),
        skipped=len(texts) - len(kept),
    )


def pack(docs: Documents, order: np.ndarray, budget: int) -> list[np.ndarray]:
    """`order`'s texts in runs whose windows hold at most `budget` padded tokens (a text over
    it alone): whole texts only, so a text's loss sees all its windows."""
    out: list[np.ndarray] = []
    run: list[int] = []
    rows, widest = 0, 0
    starts = docs.starts
    for t in order.tolist():
        count, start = int(docs.counts[t]), int(starts[t])
        longest = int(docs.lengths[start : start + count].max())
        if run and (rows + count) * max(widest, longest) > budget:
            out.append(np.asarray(run, np.int64))
            run, rows, widest = [], 0, 0
        run.append(t)
        rows, widest = rows + count, max(widest, longest)
    if run:
        out.append(np.asarray(run, np.int64))
    return out


def window_rows(docs: Documents, texts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The window rows of `texts` and, per row, which of `texts` (0..len-1) it belongs to."""
    starts = docs.starts
    rows = np.concatenate([np.arange(starts[t], starts[t] + docs.counts[t]) for t in texts])
    owner = np.repeat(np.arange(len(texts)), docs.counts[texts])
    return rows, owner
