"""One call to a cascade: the student answers every text, the teacher those it is unsure of.

All texts go through the student's predictor; the rows whose top probability is under the
threshold go again, tokenized by the teacher's own tokenizer, through the teacher's; the
teacher's rows replace the student's in request order. Tokens, attention and top tokens of a
text are those of the member that answered it, and `Outputs.answered_by` names it.
"""

from __future__ import annotations

import dataclasses
from typing import TypeVar

import numpy as np

from attnserve.service.engine.context import CallContext
from attnserve.service.engine.models.loading import LoadedModel
from attnserve.service.engine.models.tokenization import EncodedTexts
from attnserve.service.engine.request.attention import check_request
from attnserve.service.engine.request.classify import CallLimits, EngineTimings, Inputs, Outputs, run
from attnserve.service.engine.request.predictor import Predictors
from attnserve.service.errors import InvalidArgument

T = TypeVar("T")
STUDENT = "student"
TEACHER = "teacher"


async def run_cascade(
    model: LoadedModel, predictors: Predictors, inputs: Inputs, limits: CallLimits, context: CallContext
) -> Outputs:
    """Run a call on a cascade version's members and merge their answers."""
    members = model.cascade
    assert members is not None, "run_cascade is called for cascade versions only"
    if inputs.texts is None:
        # Each member has its own vocabulary: ids made for one mean nothing to the other.
        raise InvalidArgument(f"model {model.name!r} is a cascade: send texts, not token ids")
    # Each text's attention comes from the member that answers it, in that member's shape:
    # a mode is served when both members have it (the V2 contract, one tensor for the batch,
    # declares attention only where their shapes agree).
    for member in members.members:
        check_request(member.attention_kind, inputs.mode, inputs.top_k, model.name)
    student = predictors.of(members.student)
    teacher = predictors.of(members.teacher)  # both resolved before any work: unloading refuses at once
    first = await run(student, inputs, limits, context)
    deferred = np.flatnonzero(first.probabilities.max(axis=1) < members.threshold)
    counter = model.metrics.metrics.cascade_texts
    version = str(model.version)
    counter.labels(model.name, version, STUDENT).inc(len(first) - len(deferred))
    answered = [STUDENT] * len(first)
    if len(deferred) == 0:
        return dataclasses.replace(first, answered_by=tuple(answered))
    texts = [inputs.texts[int(i)] for i in deferred]
    second = await run(teacher, dataclasses.replace(inputs, texts=texts), limits, context)
    counter.labels(model.name, version, TEACHER).inc(len(deferred))
    for i in deferred:
        answered[int(i)] = TEACHER
    return _merge(first, second, [int(i) for i in deferred], tuple(answered))


def _merge(first: Outputs, second: Outputs, rows: list[int], answered: tuple[str, ...]) -> Outputs:
    """The student's outputs with the teacher's in place of `rows` (its i-th row is rows[i])."""
    logits, probabilities, label_ids = first.logits.copy(), first.probabilities.copy(), first.label_ids.copy()
    logits[rows], probabilities[rows], label_ids[rows] = second.logits, second.probabilities, second.label_ids
    encoded = _merge_encoded(first.encoded, second.encoded, rows)
    attention = _merge_rows(first.attention, second.attention, rows)
    top = _merge_rows(first.top_tokens, second.top_tokens, rows)
    attribution = _merge_rows(first.attribution, second.attribution, rows)
    attribution_rows = _merge_rows(first.attribution_rows, second.attribution_rows, rows)
    a, b = first.timings, second.timings
    timings = EngineTimings(
        a.tokenize + b.tokenize,
        a.queue + b.queue,
        a.inference + b.inference,
        a.attribution + b.attribution,
        a.attribution_started or b.attribution_started,
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
        attribution=attribution,
        attribution_rows=attribution_rows,
        attribution_spans=first.attribution_spans + second.attribution_spans,
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
