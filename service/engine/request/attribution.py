"""Attributions: how much each word of a text moved the predicted class's probability.

Both methods are made of forward rows only, so they run through the version's own batcher
like any texts (admitted, batched, traced and metered with the call that asked):

- occlusion: one row per word with that word's pieces removed; the word's score is
  p(c | text) - p(c | text without the word), c the class the reply names.
- shapley: KernelSHAP (Lundberg & Lee, 2017) over coalitions of words, a coalition's value
  being p(c | the text with only its words). Texts of few words are enumerated exactly;
  longer ones are sampled (sizes by the Shapley kernel, each coalition with its complement)
  within the request's budget of rows. The scores add up to p(c | text) - p(c | no words).

A "word" is what the tokenizer's pre-tokenizer made a word: its pieces merged (Encoding's
word ids, or touching offsets where there are none). Special tokens ([CLS], [SEP]) stay in
every row and are never scored: each token carries its word's score, a special token 0.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import numpy as np
from tokenizers import Encoding

from attnserve.service.common.vocabulary import Attribution
from attnserve.service.engine.models.tokenization import EncodedTexts, TokenIds
from attnserve.service.errors import InvalidArgument

DEFAULT_BUDGET = 64  # shapley rows per text when a request names none
_RIDGE = 1e-6  # keeps the weighted least squares solvable when sampled coalitions repeat


@dataclass(frozen=True, slots=True)
class Explain:
    """What a call asks to be attributed: a method and, for shapley, rows per text."""

    method: Attribution = Attribution.NONE
    budget: int = 0  # forward rows per text (shapley); 0: DEFAULT_BUDGET

    @property
    def wanted(self) -> bool:
        return self.method != Attribution.NONE


NO_ATTRIBUTION = Explain()


@dataclass(frozen=True, slots=True)
class TextPlan:
    """One text's forward rows: coalitions of its words, and the weights to solve them."""

    units: list[list[int]]  # token positions of each word
    length: int  # tokens of the text
    coalitions: np.ndarray  # [R, m] bool: the words each row keeps; row 0 keeps all
    rows: list[np.ndarray]  # [R] token ids per row
    weights: np.ndarray | None  # [R] kernel weights (shapley); None: occlusion


def words(encoding: Encoding | None, ids: TokenIds, special_ids: frozenset[int]) -> list[list[int]]:
    """Token positions per word, in order; special tokens belong to none."""
    if encoding is None:  # rows of ids sent by the caller: every token that is not special
        return [[i] for i, token in enumerate(ids) if int(token) not in special_ids]
    special = encoding.special_tokens_mask
    word_ids = encoding.word_ids
    offsets = encoding.offsets
    units: list[list[int]] = []
    previous: tuple[int | None, int] = (None, -1)  # (word id, end offset) of the last piece
    for position in range(len(ids)):
        if special[position]:
            previous = (None, -1)
            continue
        word, (start, end) = word_ids[position], offsets[position]
        joined = word == previous[0] if word is not None else start == previous[1]
        if units and joined:
            units[-1].append(position)
        else:
            units.append([position])
        previous = (word, end)
    return units


def rows_needed(method: Attribution, words_in_text: int, budget: int) -> int:
    """Forward rows one text's attribution takes (the text itself included)."""
    if method == Attribution.OCCLUSION:
        return words_in_text + 1
    if words_in_text <= 1:
        return 2 if words_in_text == 1 else 1
    exact = 2**words_in_text if words_in_text < 31 else math.inf
    return int(min(exact, max(budget, 2)))


def plan_text(
    method: Attribution, ids: np.ndarray, units: list[list[int]], budget: int, filler: int
) -> TextPlan:
    """The rows of one text; `filler` is the one token of a row that keeps no token at all."""
    m = len(units)
    count = rows_needed(method, m, budget)
    weights: np.ndarray | None = None
    if m == 0:  # nothing but special tokens: the text's own row, every score 0
        return TextPlan(units, len(ids), np.ones((1, 0), dtype=bool), [ids], None)
    if method == Attribution.OCCLUSION:
        coalitions = np.ones((count, m), dtype=bool)
        coalitions[np.arange(1, count), np.arange(m)] = False
    elif count >= 2**m:
        coalitions, weights = _every_coalition(m)
    else:
        seed = zlib.crc32(np.ascontiguousarray(ids, dtype=np.int64).tobytes())
        coalitions, weights = _sampled_coalitions(m, count, np.random.default_rng(seed))
    rows = [without(ids, units, keep, filler) for keep in coalitions]
    return TextPlan(units, len(ids), coalitions, rows, weights)


def scores(plan: TextPlan, values: np.ndarray) -> np.ndarray:
    """Per token [n] float32: each word's score on its pieces, 0 on special tokens.
    `values`: [R] the predicted class's probability for each of the plan's rows."""
    m = len(plan.units)
    per_word = np.zeros(m, dtype=np.float64)
    if m and plan.weights is None:  # occlusion: row j + 1 lacks word j
        per_word = values[0] - values[1:]
    elif m and plan.weights is not None:
        per_word = _kernel_shap(plan.coalitions, values.astype(np.float64), plan.weights)
    result = np.zeros(plan.length, dtype=np.float32)
    for word, positions in zip(per_word, plan.units, strict=True):
        result[positions] = word
    return result


def without(ids: np.ndarray, units: list[list[int]], keep: np.ndarray, filler: int) -> np.ndarray:
    """`ids` with the words `keep` leaves out removed (special tokens stay); a row left with no
    token at all is the one `filler` token."""
    dropped = [position for unit, kept in zip(units, keep, strict=True) if not kept for position in unit]
    row = np.delete(ids, dropped) if dropped else ids
    return row if len(row) else np.array([filler], dtype=ids.dtype)


def _every_coalition(m: int) -> tuple[np.ndarray, np.ndarray]:
    """All 2^m coalitions, the full one first and the empty one second, with kernel weights."""
    numbers = np.arange(2**m)
    coalitions = ((numbers[:, None] >> np.arange(m)) & 1).astype(bool)
    sizes = coalitions.sum(axis=1)
    order = np.concatenate([[2**m - 1, 0], np.arange(1, 2**m - 1)])
    coalitions, sizes = coalitions[order], sizes[order]
    weights = np.zeros(len(order))
    inner = (sizes > 0) & (sizes < m)
    s = sizes[inner]
    weights[inner] = (m - 1) / (np.array([math.comb(m, int(k)) for k in s]) * s * (m - s))
    return coalitions, weights


def _sampled_coalitions(m: int, count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The full and the empty coalition, then `count - 2` drawn by the Shapley kernel (size
    first, then which words), each followed by its complement; equal weights."""
    sizes = np.arange(1, m)
    kernel = (m - 1) / (sizes * (m - sizes))
    drawn = rng.choice(sizes, size=(count - 1) // 2, p=kernel / kernel.sum())
    coalitions = [np.ones(m, dtype=bool), np.zeros(m, dtype=bool)]
    for size in drawn:
        keep = np.zeros(m, dtype=bool)
        keep[rng.choice(m, size=int(size), replace=False)] = True
        coalitions.extend((keep, ~keep))
    coalitions = coalitions[:count]
    weights = np.ones(len(coalitions))
    weights[:2] = 0.0
    return np.array(coalitions), weights


def _kernel_shap(coalitions: np.ndarray, values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Weighted least squares with the scores summing to v(all) - v(none) (rows 0 and 1):
    the last word's score is eliminated, then solved for the others."""
    m = coalitions.shape[1]
    total = values[0] - values[1]
    if m == 1:
        return np.array([total])
    z = coalitions[2:].astype(np.float64)
    y = values[2:] - values[1] - z[:, -1] * total
    x = z[:, :-1] - z[:, -1:]
    w = weights[2:]
    gram = x.T @ (x * w[:, None]) + _RIDGE * np.eye(m - 1)
    head = np.linalg.solve(gram, x.T @ (w * y))
    return np.append(head, total - head.sum())


def plan_call(
    explain: Explain,
    encoded: EncodedTexts,
    special_ids: frozenset[int],
    filler: int,
    max_rows: int,
) -> list[TextPlan]:
    """Every text's rows, refused up front (INVALID_ARGUMENT) when they would pass the
    server's cap on one call's forward rows (`max_attribution_rows`)."""
    method = explain.method
    budget = explain.budget or DEFAULT_BUDGET
    if method == Attribution.SHAPLEY and budget > max_rows:
        raise InvalidArgument(
            f"attribution_budget: {budget} forward rows per text asked; this server allows at most "
            f"{max_rows} in one call (max_attribution_rows)"
        )
    units = [
        words(encoded.encodings[i] if encoded.encodings is not None else None, encoded.ids[i], special_ids)
        for i in range(len(encoded))
    ]
    needed = sum(rows_needed(method, len(each), budget) for each in units)
    if needed > max_rows:
        smaller = ", or a smaller attribution_budget" if method == Attribution.SHAPLEY else ""
        raise InvalidArgument(
            f"attribution: {method.word} of these {len(encoded)} texts takes {needed} forward rows; this "
            f"server allows {max_rows} in one call (max_attribution_rows): send fewer or shorter "
            f"texts{smaller}"
        )
    return [
        plan_text(method, np.asarray(encoded.ids[i], dtype=np.int64), units[i], budget, filler)
        for i in range(len(encoded))
    ]
