"""Special tokens and word pieces, as the explorer's pieces.js treats them: a word's column
is the sum of its pieces' columns (the attention the word receives), its row the mean of
their rows (rows still sum to 1). [CLS], [SEP] and other added tokens stay on their own."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

SPECIAL = re.compile(r"^(\[(CLS|SEP|PAD|MASK|BOS|EOS)\]|</?s>|<(cls|sep|pad|mask)>)$")


@dataclass
class Word:
    indices: list[int]
    special: bool
    label: str
    pieces: list[str] = field(default_factory=list)


def special_flags(tokens: Sequence[str], special: Sequence[bool] = ()) -> list[bool]:
    """The reply's flags where it has them, else the token's form."""
    if len(special) == len(tokens) and tokens:
        return [bool(flag) for flag in special]
    return [bool(SPECIAL.match(token)) for token in tokens]


def _usable(offsets: Sequence[tuple[int, int]], tokens: Sequence[str], text: str) -> bool:
    return len(offsets) == len(tokens) and all(0 <= a <= b <= len(text) for a, b in offsets)


def word_groups(
    tokens: Sequence[str],
    text: str,
    offsets: Sequence[tuple[int, int]] = (),
    special: Sequence[bool] = (),
) -> list[Word]:
    """One group per word. With offsets a piece continues a word when it starts where the
    previous piece ended, between two word characters (or carries "##"); without them only
    the "##" prefix says so."""
    flags = special_flags(tokens, special)
    spans = list(offsets) if offsets and _usable(offsets, tokens, text) else None
    words: list[Word] = []
    for i, token in enumerate(tokens):
        previous = words[-1] if words else None
        joins = False
        if previous is not None and not flags[i] and not previous.special:
            if token.startswith("##"):
                joins = True
            elif spans is not None:
                start, end = spans[i]
                joins = (
                    start == spans[previous.indices[-1]][1]
                    and end > start > 0
                    and (text[start - 1].isalnum() or text[start - 1] == "_")
                    and (text[start].isalnum() or text[start] == "_")
                )
        if joins and previous is not None:
            previous.indices.append(i)
        else:
            words.append(Word([i], flags[i], token))
    for word in words:
        word.pieces = [tokens[i] for i in word.indices]
        if word.special or (len(word.indices) == 1 and not word.label.startswith("##")):
            continue
        if spans is not None:
            word.label = text[spans[word.indices[0]][0] : spans[word.indices[-1]][1]]
        else:
            word.label = "".join(piece.removeprefix("##") for piece in word.pieces)
    return words


def merge_vector(weights: np.ndarray, words: Sequence[Word]) -> np.ndarray:
    """[n] -> [words]: a word receives the sum of its pieces' weights."""
    return np.asarray([weights[w.indices].sum() for w in words], dtype=weights.dtype)


def merge_matrix(matrix: np.ndarray, words: Sequence[Word]) -> np.ndarray:
    """[..., n, n] -> [..., words, words]: rows averaged over a word's pieces, columns summed."""
    columns = np.stack([matrix[..., w.indices].sum(axis=-1) for w in words], axis=-1)
    return np.stack([columns[..., w.indices, :].mean(axis=-2) for w in words], axis=-2)


def mark_special(labels: list[Any], special: Sequence[bool]) -> None:
    """Tick labels of added tokens ([CLS], [SEP]) drawn apart: dark red, italic."""
    for tick, flag in zip(labels, special, strict=False):
        if flag:
            tick.set_color("#b2182b")
            tick.set_fontstyle("italic")
