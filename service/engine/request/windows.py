"""Long texts read whole: each text cut into overlapping windows, every window a row of the
call, their answers folded back into one answer per text.

`plan` turns a call's texts into `Documents`: the rows to run (every window of every text,
each with the tokenizer's special tokens) and, per text, which rows are its windows, where
each window starts among the text's own tokens and which characters it covers. After the
rows ran (as any rows do: the version's batcher, its token budget, deadlines and the call's
share of the queue), `fold` builds the call's `Outputs` per text:

- logits: the mean of its windows' logits (`mean`), those of the window whose top
  probability is largest (`max`), or the windows' logits weighed by a document head learned
  on long texts (`head`); probabilities from them by the bundle's scoring;
- windows: per window its characters, its own probabilities and its weight in the decision;
- attention (POOLED) and top tokens on the whole text's tokens: each token weighs what it
  weighs in the window where it has the most context (the farthest from that window's
  edges, as BERT's authors read overlapping windows), times that window's weight,
  renormalised to sum to 1; special tokens weigh 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from tokenizers import Encoding

from attnserve.service.bundle import LongTexts, Scoring
from attnserve.service.common.weights import importance
from attnserve.service.engine.models.tokenization import EncodedTexts, TokenIds
from attnserve.service.engine.request.attention import top_k
from attnserve.service.engine.request.results import Outputs, TopTokens, Window


@dataclass(frozen=True, slots=True)
class Documents:
    """A call's texts as windows: `rows` runs, the rest folds the rows back per text."""

    rows: EncodedTexts  # every window of every text, in text order
    whole: EncodedTexts  # per text its whole token sequence (the reply's tokens and offsets)
    spans: list[range]  # per text, its windows' rows
    starts: list[list[int]]  # per text and window, its first text token's place among the text's tokens
    chars: list[list[tuple[int, int]]]  # per text and window, the [start, end) characters it covers

    @property
    def windowed(self) -> bool:
        """Some text has more than one window."""
        return len(self.rows) > len(self.spans)


def plan(windows: Sequence[list[Encoding]], whole: Sequence[Encoding], stride: int) -> Documents:
    """The rows and the fold of texts cut into `windows` sharing `stride` tokens
    (TextTokenizer.encode_windows)."""
    rows: list[Encoding] = []
    spans, starts, chars = [], [], []
    for each in windows:
        spans.append(range(len(rows), len(rows) + len(each)))
        rows.extend(each)
        starts.append(_starts(each, stride))
        chars.append([_covered(encoding) for encoding in each])
    return Documents(_encoded(rows), _encoded(list(whole)), spans, starts, chars)


def _encoded(encodings: list[Encoding]) -> EncodedTexts:
    ids: list[TokenIds] = [encoding.ids for encoding in encodings]
    return EncodedTexts(ids, [len(row) for row in ids], [False] * len(ids), encodings)


def text_positions(encoding: Encoding) -> list[int]:
    return [i for i, special in enumerate(encoding.special_tokens_mask) if not special]


def _covered(encoding: Encoding) -> tuple[int, int]:
    """The [start, end) characters of a window's text tokens."""
    text = text_positions(encoding)
    return (encoding.offsets[text[0]][0], encoding.offsets[text[-1]][1]) if text else (0, 0)


def _starts(each: list[Encoding], stride: int) -> list[int]:
    """Each window's first text token's place among the whole text's text tokens: a window
    starts `stride` tokens before the end of the previous one, as tokenizers' overflow cuts
    them (not found by offsets: two tokens may share a character, as a metaspace does)."""
    starts = [0]
    for previous in each[:-1]:
        starts.append(starts[-1] + len(text_positions(previous)) - stride)
    return starts


def fold(
    out: Outputs, docs: Documents, policy: LongTexts, scoring: Scoring, temperature: float, k: int
) -> Outputs:
    """The call's outputs per text from its windows' rows (`k`: top tokens per text)."""
    classes = out.logits.shape[1]
    logits = np.empty((len(docs.spans), classes), np.float32)
    windows: list[list[Window]] = []
    weights_per_text: list[np.ndarray] = []
    for i, span in enumerate(docs.spans):
        rows = slice(span.start, span.stop)
        window_logits, window_scores = out.logits[rows], out.probabilities[rows]
        vectors = None if out.vectors is None else out.vectors[rows]
        weights = combine_weights(window_scores, window_logits, policy, scoring, vectors)
        logits[i] = weights @ window_logits
        weights_per_text.append(weights)
        windows.append([
            Window(start, end, window_scores[w], float(weights[w]))
            for w, (start, end) in enumerate(docs.chars[i])
        ])  # fmt: skip
    attention: list[np.ndarray] | None = None
    top: list[TopTokens] | None = None
    if out.attention is not None:
        attention = [
            _whole_attention(out.attention, docs, i, weights_per_text[i]) for i in range(len(docs.spans))
        ]
        if k:
            top = [top_k(vector, k) for vector in attention]
    return Outputs(
        docs.whole,
        logits,
        scoring.probabilities(logits, temperature),
        logits.argmax(axis=1),
        attention,
        top,
        out.timings,
        out.batch_spans,
        windows=windows,
    )


def combine_weights(
    scores: np.ndarray,
    logits: np.ndarray,
    policy: LongTexts,
    scoring: Scoring,
    vectors: np.ndarray | None = None,
) -> np.ndarray:
    """[W] each window's weight in its text's answer, from the windows' scores and logits [W, C]:
    1/W each (mean), 1 for the window whose top probability is largest (max; a regression's value
    has no confidence, so its windows are averaged), or the document head's attention (head, from
    the windows' vectors [W, D] too where it reads them)."""
    count = len(scores)
    if policy.head is not None:
        return policy.head.scores(logits, vectors)
    if policy.combine == "max" and count > 1 and not scoring.regression:
        weights = np.zeros(count, np.float32)
        weights[int(scores.max(axis=1).argmax())] = 1.0
        return weights
    return np.full(count, 1.0 / count, np.float32)


def combined(
    logits: np.ndarray,
    policy: LongTexts,
    scoring: Scoring,
    temperature: float = 1.0,
    vectors: np.ndarray | None = None,
) -> np.ndarray:
    """[C] a text's logits from its windows' logits [W, C] (and vectors [W, D], for a head that
    reads them), as the policy combines them."""
    weights = combine_weights(scoring.probabilities(logits, temperature), logits, policy, scoring, vectors)
    return np.asarray(weights @ logits, np.float32)


def _whole_attention(rows: list[np.ndarray], docs: Documents, text: int, weights: np.ndarray) -> np.ndarray:
    """One weight per token of the whole text (see the module's docstring)."""
    whole = docs.whole.encodings
    assert whole is not None and docs.rows.encodings is not None
    special = whole[text].special_tokens_mask
    positions = [i for i, flag in enumerate(special) if not flag]  # the text's tokens in the whole
    vector = np.zeros(len(special), np.float32)
    span, starts = docs.spans[text], docs.starts[text]
    best = np.full(len(positions), -1.0)
    for w, row in enumerate(span):
        encoding = docs.rows.encodings[row]
        own = text_positions(encoding)
        per_token = importance(rows[row])
        for j, place in enumerate(own):
            g = starts[w] + j
            if g >= len(positions):
                break
            context = min(j, len(own) - 1 - j)  # tokens on its nearer side within the window
            if context > best[g]:
                best[g] = context
                vector[positions[g]] = per_token[place] * weights[w]
    total = vector.sum()
    return vector / total if total > 0 else vector


def whole_windows(docs: Documents, out: Outputs) -> list[list[Window]]:
    """Texts that each fit one window: that window, its characters, weight 1."""
    return [[Window(*docs.chars[i][0], out.probabilities[i], 1.0)] for i in range(len(docs.spans))]
