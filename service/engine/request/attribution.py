"""Attributions: how much each word of a text moved the predicted class's probability.

Both methods are made of forward rows only, so they run through the version's own batcher
like any texts (admitted, batched, traced and metered with the call that asked):

- occlusion: one row per word with that word's pieces removed; the word's score is
  p(c | text) - p(c | text without the word), c the class the reply names.
- shapley: KernelSHAP (Lundberg & Lee, 2017) over coalitions of words, a coalition's value
  being p(c | the text with only its words). Texts of few words are enumerated exactly;
  longer ones are sampled (sizes by the Shapley kernel, each coalition with its complement)
  within the request's budget of coalitions. The scores add up to p(c | text) - p(c | no words),
  solved with that sum as a constraint treating every word alike (no word is eliminated).

The text itself is never run again: its value is the reply's own probability of c, from the
graph that answered the reply, so the scores explain that reply (and Shapley's sum is exact).

A "word" is what the tokenizer's pre-tokenizer made a word: its pieces merged (Encoding's
word ids, or touching offsets where there are none). Special tokens ([CLS], [SEP]) stay in
every row and are never scored: each token carries its word's score, a special token 0.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from tokenizers import Encoding

from attnserve.service.common.vocabulary import Attribution
from attnserve.service.engine.models.tokenization import EncodedTexts, TokenIds
from attnserve.service.errors import InvalidArgument

DEFAULT_BUDGET = 64  # shapley coalitions per text when a request names none
_RIDGE = 1e-9  # relative to the largest diagonal: keeps the system solvable when coalitions repeat


@dataclass(frozen=True, slots=True)
class Explain:
    """What a call asks to be attributed: a method and, for shapley, rows per text."""

    method: Attribution = Attribution.NONE
    budget: int = 0  # coalitions per text (shapley), the text itself included; 0: DEFAULT_BUDGET
    label: int | None = None  # the label whose score is explained; None: each text's reply label

    @property
    def wanted(self) -> bool:
        return self.method != Attribution.NONE


NO_ATTRIBUTION = Explain()


def explained_label(
    labels: Sequence[str], name: str, model: str, where: str = "attribution_label"
) -> int | None:
    """The id of the label an attribution explains, from the call's `attribution_label` (None:
    each text's own); a name the model does not have is INVALID_ARGUMENT naming its labels
    (`where`: how the front end names the field)."""
    if not name:
        return None
    if name not in labels:
        shown = ", ".join(labels[:20]) + (", ..." if len(labels) > 20 else "")
        raise InvalidArgument(
            f"{where}: {name[:64]!r} is not a label of {model} ({shown})", field="attribution_label"
        )
    return list(labels).index(name)


@dataclass(frozen=True, slots=True)
class TextPlan:
    """One text's coalitions of its words, the rows to run for them, and the weights to solve
    them. Coalition 0 keeps every word: the text itself, whose value is the reply's, so it has
    no row; row i is coalition i + 1."""

    units: list[list[int]]  # token positions of each word
    length: int  # tokens of the text
    coalitions: np.ndarray  # [R + 1, m] bool: the words each coalition keeps; 0 keeps all
    rows: list[np.ndarray]  # [R] token ids of coalitions 1..R
    weights: np.ndarray | None  # [R + 1] kernel weights (shapley); None: occlusion


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


def least_budget(words_in_text: int) -> int:
    """The fewest shapley coalitions (the text and the empty one included) that determine every
    word's score: all of them for a text of few words, else the two fixed ones and one more per
    word but one (the scores' sum is fixed, so m words leave m - 1 unknowns)."""
    return min(1 << words_in_text, words_in_text + 1)


def coalitions_for(words_in_text: int, budget: int) -> int:
    """Shapley coalitions one text takes at `budget` (already at least `least_budget`)."""
    return min(1 << words_in_text, budget)


def rows_needed(method: Attribution, words_in_text: int, budget: int) -> int:
    """Forward rows one text's attribution runs (the text itself is the reply's own row)."""
    if words_in_text == 0:
        return 0
    if method == Attribution.OCCLUSION:
        return words_in_text
    return coalitions_for(words_in_text, budget) - 1


def plan_text(
    method: Attribution, ids: np.ndarray, units: list[list[int]], budget: int, filler: int
) -> TextPlan:
    """The rows of one text; `filler` is the one token of a row that keeps no token at all.
    `budget` (shapley) is at least `least_budget` of the text's words (`budgets` sees to it)."""
    m = len(units)
    weights: np.ndarray | None = None
    if m == 0:  # nothing but special tokens: no row to run, no score but 0
        return TextPlan(units, len(ids), np.ones((1, 0), dtype=bool), [], None)
    if method == Attribution.OCCLUSION:
        coalitions = np.ones((m + 1, m), dtype=bool)
        coalitions[np.arange(1, m + 1), np.arange(m)] = False
    else:
        count = coalitions_for(m, budget)
        if count >= 1 << m:
            coalitions, weights = _every_coalition(m)
        else:
            seed = zlib.crc32(np.ascontiguousarray(ids, dtype=np.int64).tobytes())
            coalitions, weights = _sampled_coalitions(m, count, np.random.default_rng(seed))
    rows = [without(ids, units, keep, filler) for keep in coalitions[1:]]
    return TextPlan(units, len(ids), coalitions, rows, weights)


def scores(plan: TextPlan, values: np.ndarray, full: float) -> np.ndarray:
    """Per token [n] float32: each word's score on its pieces, 0 on special tokens.
    `values`: [R] the predicted class's probability for each of the plan's rows; `full`: the
    reply's own probability of that class for the whole text."""
    m = len(plan.units)
    every = np.concatenate([[full], np.asarray(values, dtype=np.float64)])
    per_word = np.zeros(m, dtype=np.float64)
    if m and plan.weights is None:  # occlusion: coalition j + 1 lacks word j
        per_word = every[0] - every[1:]
    elif m and plan.weights is not None:
        per_word = _kernel_shap(plan.coalitions, every, plan.weights)
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
    """Weighted least squares over the coalitions between the full and the empty one (rows 0
    and 1), with the scores' sum held to v(all) - v(none) by a Lagrange multiplier: every word
    enters alike, so where the rows leave the system short the scores still depend on the
    coalitions, never on which word came last."""
    m = coalitions.shape[1]
    total = values[0] - values[1]
    if m == 1:
        return np.array([total])
    z = coalitions[2:].astype(np.float64)
    y = values[2:] - values[1]
    w = weights[2:]
    gram = z.T @ (z * w[:, None])
    gram += _RIDGE * max(float(gram.diagonal().max()), 1.0) * np.eye(m)
    system = np.zeros((m + 1, m + 1))
    system[:m, :m] = gram
    system[:m, m] = system[m, :m] = 1.0
    rhs = np.append(z.T @ (w * y), total)
    return np.linalg.solve(system, rhs)[:m]


def text_units(encoded: EncodedTexts, special_ids: frozenset[int]) -> list[list[list[int]]]:
    """Every text's words (token positions per word)."""
    encodings = encoded.encodings
    return [
        words(encodings[i] if encodings is not None else None, encoded.ids[i], special_ids)
        for i in range(len(encoded))
    ]


def budgets(explain: Explain, units: list[list[list[int]]], max_rows: int) -> list[int]:
    """Each text's shapley coalitions: the request's budget, refused (INVALID_ARGUMENT) when it is
    too few for a text's words; with none named, DEFAULT_BUDGET raised to what each text needs."""
    if explain.method != Attribution.SHAPLEY:
        return [0] * len(units)
    if explain.budget > max_rows:
        raise InvalidArgument(
            f"attribution_budget: {explain.budget} coalitions per text asked; this server runs at "
            f"most {max_rows} rows in one call (max_attribution_rows)",
            field="attribution_budget",
        )
    chosen = []
    for index, each in enumerate(units):
        least = least_budget(len(each))
        if explain.budget and explain.budget < least:
            raise InvalidArgument(
                f"attribution_budget: {explain.budget} coalitions cannot determine the scores of the "
                f"{len(each)} words of text {index}; shapley needs at least {least} (words + 1)",
                field="attribution_budget",
            )
        chosen.append(explain.budget or max(DEFAULT_BUDGET, least))
    return chosen


def rows_of(explain: Explain, units: list[list[list[int]]], chosen: list[int]) -> list[int]:
    """Forward rows per text."""
    method = explain.method
    return [rows_needed(method, len(each), budget) for each, budget in zip(units, chosen, strict=True)]


def check_rows(explain: Explain, texts: int, needed: int, max_rows: int) -> None:
    """Refused (INVALID_ARGUMENT) before any row runs when over the server's cap."""
    if needed > max_rows:
        smaller = ", or a smaller attribution_budget" if explain.method == Attribution.SHAPLEY else ""
        raise InvalidArgument(
            f"attribution: {explain.method.word} of these {texts} texts takes {needed} forward rows; "
            f"this server allows {max_rows} in one call (max_attribution_rows): send fewer or shorter "
            f"texts{smaller}",
            field="attribution",
        )


def plan_texts(
    explain: Explain,
    encoded: EncodedTexts,
    units: list[list[list[int]]],
    chosen: list[int],
    filler: int,
    which: list[int] | None = None,
) -> list[TextPlan]:
    """The plans of the texts `which` (default: all), from their words and budgets."""
    picked = range(len(encoded)) if which is None else which
    return [
        plan_text(explain.method, np.asarray(encoded.ids[i], dtype=np.int64), units[i], chosen[i], filler)
        for i in picked
    ]
