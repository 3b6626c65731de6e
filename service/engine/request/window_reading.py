"""A call whose texts run as several windows: the windows' rows, the fold, and occlusion at two
levels, which a long text can afford.

Occlusion over a long text word by word would run a row per word of every window. Instead:

1. window level, with no row at all: each window's score is the drop of the text's
   probability of its label when the fold leaves that window out (the other windows' logits
   combined as the policy combines them);
2. word level within the decisive window (the one whose absence drops it most): a row per
   word of that window, the word removed, that row's logits in the window's place in the fold.

The reply carries both: `Window.attribution` per window, and per token of the whole text the
word-level score inside the decisive window (0 elsewhere; its window is the one whose
`attribution` is largest).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import numpy as np

from attnserve.service.common.vocabulary import AttentionMode, Attribution
from attnserve.service.engine.context import CallContext
from attnserve.service.engine.models.loading import LoadedModel
from attnserve.service.engine.models.tokenization import EncodedTexts
from attnserve.service.engine.request.attribution import Explain, TextPlan, plan_text, words
from attnserve.service.engine.request.predictor import Predictor
from attnserve.service.engine.request.results import Outputs, Window
from attnserve.service.engine.request.windows import Documents, combined, fold, text_positions
from attnserve.service.errors import InvalidArgument


async def read_windows(
    predictor: Predictor,
    documents: Documents,
    mode: AttentionMode,
    k: int,
    explain: Explain,
    context: CallContext,
    timing: tuple[float, float],
    max_rows: int,
) -> Outputs:
    """Every window a row (the call's share of the queue, paced), folded back per text
    (windows.py), attributed when asked (`timing`: the call's tokenizing seconds and arrival;
    `max_rows`: the cap on the attribution's rows, checked before any row runs)."""
    model = predictor.model
    units: list[list[list[int]]] = []  # per window row its words, when an attribution is asked
    if explain.method is not Attribution.NONE:  # finding words grows with the text: off the loop
        units = await asyncio.to_thread(window_words, model, documents, explain, max_rows)
    # POOLED is what the fold maps onto the whole text; top tokens are read from it.
    rows_mode = AttentionMode.POOLED if mode is AttentionMode.POOLED or k else AttentionMode.NONE
    lane = predictor.lane(rows_mode, 0)
    rows = await predictor.predict(
        documents.rows, rows_mode, 0, context, lane, paced=True, tokenize=timing[0], started=timing[1]
    )
    # Folding grows with the windows and their tokens: off the event loop, as attributions are.
    policy = model.tokenizer.windows
    folded = await asyncio.to_thread(fold, rows, documents, policy, model.scoring, model.temperature, k)
    if mode is AttentionMode.NONE:
        folded.attention = None  # asked for top tokens only
    if explain.method is Attribution.OCCLUSION:
        await _occlude(predictor, folded, rows, documents, units, explain, context, lane)
    return folded


def window_words(
    model: LoadedModel, documents: Documents, explain: Explain, cap: int
) -> list[list[list[int]]]:
    """Every window row's words (token positions per word), refusing up front what windows do
    not offer and word rows that could pass the cap (the decisive window is known only after
    the windows ran: each text counts its largest)."""
    if explain.method is not Attribution.OCCLUSION:
        raise InvalidArgument(
            f"attribution: a text read as windows is attributed by occlusion (windows, then the words of "
            f"the decisive one); {explain.method.word} is not offered over windows",
            field="attribution",
        )
    encodings = documents.rows.encodings
    assert encodings is not None
    special = model.tokenizer.special_ids
    units = [words(encoding, encoding.ids, special) for encoding in encodings]
    most = sum(max(len(units[r]) for r in span) for span in documents.spans)
    if most > cap:
        raise InvalidArgument(
            f"attribution: occlusion of these texts' decisive windows may take {most} forward rows; this "
            f"server allows {cap} in one call (max_attribution_rows): send fewer texts",
            field="attribution",
        )
    return units


@dataclass(frozen=True, slots=True)
class _Occlusion:
    """One call's texts at the window level, and the word rows of their decisive windows."""

    labels: list[int]  # per text, the label explained
    decisive: list[int]  # per text, its decisive window
    plans: list[TextPlan]  # per text, the occlusion rows of its decisive window's words


async def _occlude(
    predictor: Predictor,
    out: Outputs,
    windows: Outputs,
    docs: Documents,
    units: list[list[list[int]]],
    explain: Explain,
    context: CallContext,
    lane: int,
) -> None:
    # The work grows with the windows and the words: off the event loop, as every attribution's.
    model = predictor.model
    occlusion = await asyncio.to_thread(_windows_level, model, out, windows, docs, units, explain)
    rows = [row for plan in occlusion.plans for row in plan.rows]
    ran: Outputs | None = None
    if rows:
        ran = await predictor.predict(
            EncodedTexts.from_ids(rows), AttentionMode.NONE, 0, context, lane, paced=True
        )
    out.attribution = await asyncio.to_thread(_words_level, model, out, windows, docs, occlusion, ran)
    out.attribution_rows = [len(plan.rows) for plan in occlusion.plans]


def _probability(model: LoadedModel, logits: np.ndarray, label: int, vectors: np.ndarray | None) -> float:
    """The text's probability of `label` from its windows' logits [W, C] (and vectors [W, D],
    for a head that reads them), folded by the policy."""
    scoring, temperature = model.scoring, model.temperature
    folded = combined(logits, model.tokenizer.windows, scoring, temperature, vectors)
    return float(scoring.probabilities(folded[None], temperature)[0, label])


def _windows_level(
    model: LoadedModel,
    out: Outputs,
    windows: Outputs,
    docs: Documents,
    units: list[list[list[int]]],
    explain: Explain,
) -> _Occlusion:
    """Each window's score (its text's drop without it) into `out.windows`; the decisive windows'
    word rows."""
    encodings = docs.rows.encodings
    assert encodings is not None and out.windows is not None
    tokenizer = model.tokenizer
    filler = tokenizer.unk_id if tokenizer.unk_id is not None else model.manifest.pad_id
    labels, decisive, plans = [], [], []
    for i, span in enumerate(docs.spans):
        label = int(out.label_ids[i]) if explain.label is None else explain.label
        logits = windows.logits[span.start : span.stop]
        vectors = None if windows.vectors is None else windows.vectors[span.start : span.stop]
        full = float(out.probabilities[i, label])
        d = 0  # a text of one window has no window level: its one window is the decisive one
        if len(span) > 1:
            drops = [
                full - _probability(model, np.delete(logits, w, axis=0), label, _without(vectors, w))
                for w in range(len(span))
            ]
            out.windows[i] = [
                _scored(window, drop) for window, drop in zip(out.windows[i], drops, strict=True)
            ]
            d = int(np.argmax(drops))
        encoding = encodings[span.start + d]
        ids = np.asarray(encoding.ids, np.int64)
        plans.append(plan_text(Attribution.OCCLUSION, ids, units[span.start + d], 0, filler))
        labels.append(label)
        decisive.append(d)
    return _Occlusion(labels, decisive, plans)


def _words_level(
    model: LoadedModel,
    out: Outputs,
    windows: Outputs,
    docs: Documents,
    occlusion: _Occlusion,
    ran: Outputs | None,
) -> list[np.ndarray]:
    """Per text, one score per token of the whole text: each word of its decisive window, the
    text's drop when that window's row (logits and vector, `ran`'s) lacks it; 0 elsewhere."""
    encodings, whole = docs.rows.encodings, docs.whole.encodings
    assert encodings is not None and whole is not None
    scores, first = [], 0
    for i, (plan, d, label) in enumerate(
        zip(occlusion.plans, occlusion.decisive, occlusion.labels, strict=True)
    ):
        span = docs.spans[i]
        logits = windows.logits[span.start : span.stop].copy()
        vectors = None if windows.vectors is None else windows.vectors[span.start : span.stop].copy()
        full = float(out.probabilities[i, label])
        vector = np.zeros(len(whole[i].ids), np.float32)
        positions = text_positions(whole[i])
        own = {place: j for j, place in enumerate(text_positions(encodings[span.start + d]))}
        for j, unit in enumerate(plan.units):
            assert ran is not None  # a word of the plan had its row run
            logits[d] = ran.logits[first + j]
            if vectors is not None and ran.vectors is not None:
                vectors[d] = ran.vectors[first + j]
            drop = full - _probability(model, logits, label, vectors)
            for place in unit:  # the word's pieces, at their places in the whole text
                vector[positions[docs.starts[i][d] + own[place]]] = drop
        first += len(plan.rows)
        scores.append(vector)
    return scores


def _without(vectors: np.ndarray | None, w: int) -> np.ndarray | None:
    return None if vectors is None else np.delete(vectors, w, axis=0)


def _scored(window: Window, drop: float) -> Window:
    return Window(window.start, window.end, window.probabilities, window.weight, drop)
