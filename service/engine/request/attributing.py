"""A call's attribution run: its texts' words found, their rows run, their scores solved.

attribution.py says what the rows are and how scores follow from their values; this module
runs them for a call. Everything here that grows with the words or the rows (finding words,
building rows, solving KernelSHAP) runs on a worker thread, never on the event loop, where
one large request would hold up every other call, health and metadata included. The rows
run through the version's own batcher on the lane of the reply they explain, as a paced job
(queue.py): they hold a bounded share of the queue, so other callers' texts are not refused
or made to wait behind hundreds of rows.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from opentelemetry.trace.span import SpanContext

from attnserve.service.common.vocabulary import AttentionMode
from attnserve.service.engine.context import CallContext
from attnserve.service.engine.models.loading import LoadedModel
from attnserve.service.engine.models.tokenization import EncodedTexts
from attnserve.service.engine.request.attribution import (
    Explain,
    TextPlan,
    budgets,
    plan_texts,
    rows_of,
    scores,
    text_units,
)
from attnserve.service.engine.request.predictor import Predictor


@dataclass(frozen=True, slots=True)
class Words:
    """A call's texts as words for its attribution, with each text's budget and forward rows."""

    units: list[list[list[int]]]  # per text, the token positions of each word
    budgets: list[int]  # per text, shapley coalitions (0: occlusion)
    rows: list[int]  # per text, the forward rows its attribution runs


@dataclass(frozen=True, slots=True)
class Attributed:
    """The attribution of some of a call's texts, in the order they were asked."""

    scores: list[np.ndarray]  # per text [n] float32
    rows: list[int]  # per text, the forward rows run
    spans: tuple[SpanContext, ...]  # the batches that ran them
    started: float  # perf_counter
    ended: float


def words_of(model: LoadedModel, explain: Explain, encoded: EncodedTexts, max_rows: int) -> Words:
    """Every text's words and budget; refuses (INVALID_ARGUMENT) a budget too few for a text."""
    units = text_units(encoded, model.tokenizer.special_ids)
    chosen = budgets(explain, units, max_rows)
    return Words(units, chosen, rows_of(explain, units, chosen))


async def find_words(model: LoadedModel, explain: Explain, encoded: EncodedTexts, max_rows: int) -> Words:
    """`words_of` on a worker thread."""
    return await asyncio.to_thread(words_of, model, explain, encoded, max_rows)


async def attribute(
    predictor: Predictor,
    explain: Explain,
    encoded: EncodedTexts,
    words: Words,
    which: Sequence[int],
    replied: tuple[np.ndarray, np.ndarray],
    context: CallContext,
    lane: int,
) -> Attributed:
    """Attribute the texts `which` (indices into `encoded`, `words` and the reply) to the label
    the reply gives them (or the one the call names), against the probability it gives that
    label: `replied` is the reply's ([k] label ids, [k, C] probabilities)."""
    started = time.perf_counter()
    model = predictor.model
    tokenizer = model.tokenizer
    filler = tokenizer.unk_id if tokenizer.unk_id is not None else model.manifest.pad_id
    plans = await asyncio.to_thread(
        plan_texts, explain, encoded, words.units, words.budgets, filler, list(which)
    )
    rows = [row for plan in plans for row in plan.rows]
    label_ids, probabilities = replied
    labels = [int(label_ids[i]) if explain.label is None else explain.label for i in which]
    full = [float(probabilities[i, label]) for i, label in zip(which, labels, strict=True)]
    spans: tuple[SpanContext, ...] = ()
    values = np.zeros((0, probabilities.shape[1]), np.float32)
    if rows:
        model.metrics.metrics.attribution_rows.labels(
            model.name, str(model.version), explain.method.word
        ).inc(len(rows))
        out = await predictor.predict(
            EncodedTexts.from_ids(rows), AttentionMode.NONE, 0, context, lane, paced=True
        )
        values, spans = out.probabilities, out.batch_spans
    solved = await asyncio.to_thread(_solve, plans, values, labels, full)
    return Attributed(solved, [len(plan.rows) for plan in plans], spans, started, time.perf_counter())


def _solve(
    plans: list[TextPlan], values: np.ndarray, labels: list[int], full: list[float]
) -> list[np.ndarray]:
    """Each text's scores from its rows' probabilities of its label (rows in plan order)."""
    solved: list[np.ndarray] = []
    first = 0
    for plan, label, whole in zip(plans, labels, full, strict=True):
        count = len(plan.rows)
        solved.append(scores(plan, values[first : first + count, label], whole))
        first += count
    return solved
