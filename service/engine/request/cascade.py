"""One call to a cascade: the student answers every text, the teacher those it is unsure of.

Which member answers a text depends on the text alone. The student answers every cascade call
on its float32 graph (model.onnx), whatever the call asks (attention, top_k, the front end, a
file job's flags): an int8 label graph quantizes each batch's activations together, so a text
near the threshold would move with its batch mates, and the label graph would answer only the
calls that ask no attention. Export chooses the threshold on the same float32, calibrated
probabilities. The texts whose top probability is under the threshold go, tokenized by the
teacher's own tokenizer, through the teacher's predictor; the teacher's rows replace the
student's in request order. Tokens, attention, top tokens and attribution of a text are those
of the member that answered it, and `Outputs.answered_by` names it.

Everything that can refuse the call does so before any row runs: both members validate and
tokenize the texts up front, and an attribution is capped across both members together
(each text counted at the larger of its two members' rows, since either may answer it).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable
from typing import Any, TypeVar

import numpy as np

from attnserve.service.engine.context import CallContext
from attnserve.service.engine.limits import CallLimits
from attnserve.service.engine.models.loading import LoadedModel
from attnserve.service.engine.models.tokenization import EncodedTexts
from attnserve.service.engine.request.attributing import attribute, find_words
from attnserve.service.engine.request.attribution import check_rows
from attnserve.service.engine.request.classify import Inputs, answer, attach, prepare
from attnserve.service.engine.request.predictor import Predictor
from attnserve.service.engine.request.results import EngineTimings, Outputs
from attnserve.service.engine.request.runner import ATTENTION_LANE
from attnserve.service.engine.request.windows import whole_windows
from attnserve.service.errors import InvalidArgument

T = TypeVar("T")
STUDENT = "student"
TEACHER = "teacher"


async def run_cascade(
    model: LoadedModel,
    student: Predictor,
    teacher: Predictor,
    inputs: Inputs,
    limits: CallLimits,
    context: CallContext,
) -> Outputs:
    """Run a call on a cascade version's members (their predictors, held for the call) and
    merge their answers."""
    members = model.cascade
    assert members is not None, "run_cascade is called for cascade versions only"
    if inputs.texts is None:
        # Each member has its own vocabulary: ids made for one mean nothing to the other.
        raise InvalidArgument(
            f"model {model.name!r} is a cascade: send texts, not token ids", field="input_ids"
        )
    # Each text's attention comes from the member that answers it, in that member's shape: a
    # mode is served when both members have it, and the teacher's limits hold for every text.
    first_texts = prepare(student.model, inputs, limits)
    second_texts = prepare(teacher.model, inputs, limits)
    documents = first_texts.documents
    if any(p.documents is not None and p.documents.windowed for p in (first_texts, second_texts)):
        # The student's confidence over one text decides; over several windows it has none yet.
        raise InvalidArgument(
            f"texts: model {model.name!r} is a cascade, which reads each text within its members' "
            "max_len; a text needing several windows is not offered (send it to a member, or shorter)",
            field="texts",
        )
    explain = inputs.explain
    if explain.wanted:
        cap = limits.max_attribution_rows
        first_words, second_words = await together(
            find_words(student.model, explain, first_texts.encoded, cap),
            find_words(teacher.model, explain, second_texts.encoded, cap),
        )
        needed = sum(max(a, b) for a, b in zip(first_words.rows, second_words.rows, strict=True))
        check_rows(explain, len(inputs.texts), needed, cap)
    first = await answer(student, first_texts, inputs, context, ATTENTION_LANE)
    deferred = [int(i) for i in np.flatnonzero(first.probabilities.max(axis=1) < members.threshold)]
    counter = model.metrics.metrics.cascade_texts
    version = str(model.version)
    counter.labels(model.name, version, STUDENT).inc(len(first) - len(deferred))
    answered = [STUDENT] * len(first)
    merged = first
    second_lane = teacher.lane(inputs.mode, inputs.top_k)
    if deferred:
        texts = [inputs.texts[i] for i in deferred]
        subset = dataclasses.replace(inputs, texts=texts)
        second = await answer(teacher, second_texts.subset(deferred), subset, context, second_lane)
        counter.labels(model.name, version, TEACHER).inc(len(deferred))
        for i in deferred:
            answered[i] = TEACHER
        merged = _merge(first, second, deferred, tuple(answered))
    else:
        merged = dataclasses.replace(first, answered_by=tuple(answered))
    if explain.wanted:
        kept = [i for i, member in enumerate(answered) if member == STUDENT]
        replied = (merged.label_ids, merged.probabilities)
        runs = [
            (which, attribute(predictor, explain, texts.encoded, words, which, replied, context, lane))
            for which, predictor, texts, words, lane in (
                (kept, student, first_texts, first_words, ATTENTION_LANE),
                (deferred, teacher, second_texts, second_words, second_lane),
            )
            if which
        ]
        parts = await together(*(work for _, work in runs))
        for (which, _), attributed in zip(runs, parts, strict=True):
            attach(merged, which, attributed)
    if documents is not None:
        merged.windows = whole_windows(documents, merged)
    return merged


async def together(*work: Awaitable[T]) -> list[T]:
    """Every result of `work`, run concurrently; the first failure cancels the rest (the call
    has failed: its other member's rows must not run on after it), then is raised as it is."""
    tasks = [asyncio.ensure_future(each) for each in work]
    for task in tasks:  # a second failure is the same call's: seen here, never logged as lost
        task.add_done_callback(_retrieve)
    try:
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    except BaseException:  # the call was cancelled: so is its work
        for task in tasks:
            task.cancel()
        raise
    for task in pending:
        task.cancel()
    for task in tasks:
        failure = task.exception() if task in done else None
        if failure is not None:
            raise failure
    return [task.result() for task in tasks]


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


def _merge(first: Outputs, second: Outputs, rows: list[int], answered: tuple[str, ...]) -> Outputs:
    """The student's outputs with the teacher's in place of `rows` (its i-th row is rows[i])."""
    logits, probabilities, label_ids = first.logits.copy(), first.probabilities.copy(), first.label_ids.copy()
    logits[rows], probabilities[rows], label_ids[rows] = second.logits, second.probabilities, second.label_ids
    encoded = _merge_encoded(first.encoded, second.encoded, rows)
    attention = _merge_rows(first.attention, second.attention, rows)
    top = _merge_rows(first.top_tokens, second.top_tokens, rows)
    a, b = first.timings, second.timings
    timings = EngineTimings(
        a.tokenize + b.tokenize,
        a.queue + b.queue,
        a.inference + b.inference,
        started=a.started,
        enqueued=a.enqueued,
        ran_until=b.ran_until,
    )
    spans = first.batch_spans + second.batch_spans
    return Outputs(
        encoded,
        logits,
        probabilities,
        label_ids,
        attention,
        top,
        timings,
        spans,
        answered_by=answered,
    )


def _merge_rows(first: list[T] | None, second: list[T] | None, rows: list[int]) -> list[T] | None:
    """Per-text values of the student's with the teacher's in place of `rows`."""
    if first is None or second is None:
        return None
    merged = list(first)
    for source, row in enumerate(rows):
        merged[row] = second[source]
    return merged


def _merge_encoded(first: EncodedTexts, second: EncodedTexts, rows: list[int]) -> EncodedTexts:
    ids, lengths, truncated = list(first.ids), list(first.lengths), list(first.truncated)
    encodings = (
        list(first.encodings) if first.encodings is not None and second.encodings is not None else None
    )
    for source, row in enumerate(rows):
        ids[row], lengths[row], truncated[row] = (
            second.ids[source],
            second.lengths[source],
            second.truncated[source],
        )
        if encodings is not None and second.encodings is not None:
            encodings[row] = second.encodings[source]
    return EncodedTexts(ids, lengths, truncated, encodings)
