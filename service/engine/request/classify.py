"""One call through the request path: `run(predictor, inputs, limits, context) -> Outputs`.

A front end (attnserve.v1, the V2 plane, the HTTP JSON API) converts its request into
`Inputs`, calls `Core.classify` (which runs an admitted call: `run` here with the
predictor of the version the call resolved and the server's limits) and converts the
`Outputs` back. Texts are validated and tokenized here (`prepare`), and everything that can
refuse the call does so before any of its rows runs; rows of ids given by the caller are
validated against the model's vocabulary and max_len. Every API's rows join the same
batcher; the time of each stage comes back with the outputs.

One graph answers a call: its label, probabilities, attention and attribution rows all run
on the lane its reply needs (Predictor.lane), so an attribution explains the reply it comes
with (docs/explanations.md).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from opentelemetry.trace.span import SpanContext

from attnserve.service.common.vocabulary import AttentionMode
from attnserve.service.engine.context import CallContext
from attnserve.service.engine.models.loading import LoadedModel
from attnserve.service.engine.models.tokenization import EncodedTexts
from attnserve.service.engine.request.attention import check_request, reply_bytes
from attnserve.service.engine.request.attributing import Attributed, attribute, find_words
from attnserve.service.engine.request.attribution import NO_ATTRIBUTION, Explain, check_rows
from attnserve.service.engine.request.predictor import Predictor
from attnserve.service.engine.request.runner import TopTokens
from attnserve.service.errors import InvalidArgument, ReplyTooLarge


@dataclass(frozen=True, slots=True)
class Inputs:
    """One call: `texts` to tokenize, or `encoded` rows of ids (padding removed)."""

    texts: Sequence[str] | None = None
    encoded: EncodedTexts | None = None
    mode: AttentionMode = AttentionMode.NONE
    top_k: int = 0
    explain: Explain = NO_ATTRIBUTION  # an attribution to compute beside the labels (attribution.py)


@dataclass(frozen=True, slots=True)
class CallLimits:
    """The server's per-call limits the request path enforces."""

    max_texts: int
    max_reply_bytes: int
    max_attribution_rows: int = 512  # forward rows one call's attributions may take


@dataclass(slots=True)
class EngineTimings:
    """Seconds spent per stage of one call inside the engine."""

    tokenize: float  # tokenizing texts, or validating the caller's ids
    queue: float  # the longest wait of its texts for a batch
    inference: float  # the longest batch that carried its texts (post-processing included)
    attribution: float = 0.0  # the attribution's rows, from their submission to their last batch
    attribution_started: float = 0.0  # when they were submitted (perf_counter)
    # When, for the call's stage spans: the engine took it (perf_counter), its rows were
    # queued and its last batch ended (the batcher's time.monotonic()).
    started: float = 0.0
    enqueued: float = 0.0
    ran_until: float = 0.0


@dataclass(slots=True)
class Outputs:
    """One call's results, in request order (k texts, C classes)."""

    encoded: EncodedTexts  # ids, lengths, truncation and token strings per text
    logits: np.ndarray  # [k, C] float32
    probabilities: np.ndarray  # [k, C] float32
    label_ids: np.ndarray  # [k] int64
    attention: list[np.ndarray] | None  # per text, in the requested mode, padding stripped
    top_tokens: list[TopTokens] | None  # per text: (token indices, weights), largest first
    timings: EngineTimings
    batch_spans: tuple[SpanContext, ...] = ()  # the spans of the batches that ran its texts
    answered_by: tuple[str, ...] | None = None  # a cascade's member per text; None: any other model
    attribution: list[np.ndarray] | None = None  # per text [n] float32 (attribution.py); None: not asked
    attribution_rows: list[int] | None = None  # per text, the forward rows its attribution took
    attribution_spans: tuple[SpanContext, ...] = ()  # the spans of the batches that ran those rows

    def __len__(self) -> int:
        return len(self.label_ids)


@dataclass(frozen=True, slots=True)
class Prepared:
    """A call's texts, validated and tokenized for one model version."""

    encoded: EncodedTexts
    tokenize_seconds: float
    started: float  # perf_counter when the engine took the call

    def subset(self, rows: Sequence[int]) -> Prepared:
        """The texts `rows`, in that order (a cascade's deferred texts)."""
        encoded = self.encoded
        encodings = encoded.encodings
        return Prepared(
            EncodedTexts(
                [encoded.ids[i] for i in rows],
                [encoded.lengths[i] for i in rows],
                [encoded.truncated[i] for i in rows],
                [encodings[i] for i in rows] if encodings is not None else None,
            ),
            self.tokenize_seconds,
            self.started,
        )


def prepare(model: LoadedModel, inputs: Inputs, limits: CallLimits) -> Prepared:
    """Validate `inputs` for `model` and tokenize them: every refusal that needs no row."""
    started = time.perf_counter()
    if inputs.texts is not None:
        _check_count(len(inputs.texts), limits.max_texts)
        check_request(model.attention_kind, inputs.mode, inputs.top_k, model.name)
        encoded = model.tokenizer.encode(inputs.texts)
        tokenize_seconds = time.perf_counter() - started
        model.metrics.tokenize.observe(tokenize_seconds)
    elif inputs.encoded is not None:
        encoded = inputs.encoded
        _check_count(len(encoded), limits.max_texts)
        check_request(model.attention_kind, inputs.mode, inputs.top_k, model.name)
        _check_ids(model, encoded)
        tokenize_seconds = time.perf_counter() - started
    else:
        raise InvalidArgument("texts: at least one text is required", field="texts")
    _check_reply(model, encoded, inputs.mode, limits.max_reply_bytes)
    return Prepared(encoded, tokenize_seconds, started)


async def run(predictor: Predictor, inputs: Inputs, limits: CallLimits, context: CallContext) -> Outputs:
    """Validate `inputs`, run them through the version's batcher and return the outputs."""
    model = predictor.model
    prepared = prepare(model, inputs, limits)
    explain = inputs.explain
    words = None
    if explain.wanted:  # refused before any row runs when a budget or the cap does not hold
        words = await find_words(model, explain, prepared.encoded, limits.max_attribution_rows)
        check_rows(explain, len(prepared.encoded), sum(words.rows), limits.max_attribution_rows)
    lane = predictor.lane(inputs.mode, inputs.top_k)
    outputs = await answer(predictor, prepared, inputs, context, lane)
    if words is not None:
        which = list(range(len(outputs)))
        replied = (outputs.label_ids, outputs.probabilities)
        attach(outputs, which, await attribute(predictor, explain, prepared.encoded, words, which, replied,
                                               context, lane))  # fmt: skip
    return outputs


async def answer(
    predictor: Predictor, prepared: Prepared, inputs: Inputs, context: CallContext, lane: int
) -> Outputs:
    """The call's texts through the version's batcher on `lane`: labels, probabilities, attention."""
    encoded = prepared.encoded
    if inputs.texts is not None:
        predictor.model.metrics.drift.observe_truncated(encoded.truncated)
    job, gathered = await predictor.predict(encoded, inputs.mode, inputs.top_k, context, lane)
    return Outputs(
        encoded,
        gathered.logits,
        gathered.probabilities,
        gathered.label_ids,
        gathered.attention,
        gathered.top,
        EngineTimings(
            prepared.tokenize_seconds,
            job.queue_seconds,
            job.run_seconds,
            started=prepared.started,
            enqueued=job.enqueued,
            ran_until=job.ran_until,
        ),
        gathered.batch_spans,
    )


def attach(outputs: Outputs, which: Sequence[int], attributed: Attributed) -> None:
    """Put the attributions of the texts `which` into `outputs` (texts not in `which` first get
    empty places, filled by another member's attribution in a cascade)."""
    if outputs.attribution is None:
        outputs.attribution = [np.zeros(0, np.float32)] * len(outputs)
        outputs.attribution_rows = [0] * len(outputs)
    assert outputs.attribution_rows is not None
    for place, text in enumerate(which):
        outputs.attribution[text] = attributed.scores[place]
        outputs.attribution_rows[text] = attributed.rows[place]
    outputs.attribution_spans += attributed.spans
    timings = outputs.timings
    if not timings.attribution_started or attributed.started < timings.attribution_started:
        timings.attribution_started = attributed.started
    timings.attribution = max(timings.attribution, attributed.ended - timings.attribution_started)


def _check_count(count: int, limit: int) -> None:
    if count == 0:
        raise InvalidArgument("texts: at least one text is required", field="texts")
    if count > limit:
        raise InvalidArgument(f"texts: {count} texts in one request; the limit is {limit}", field="texts")


def _check_reply(model: LoadedModel, encoded: EncodedTexts, mode: AttentionMode, limit: int) -> None:
    """Refuse up front a request whose reply would exceed `limit` (max_reply_bytes): built anyway,
    it would fail at a client with the default receive limit after all the work."""
    lengths = encoded.lengths
    spec = model.manifest.attention
    # Per text besides attention: logits, probabilities, tokens with their offsets and special
    # flags, and framing.
    estimate = sum(lengths) * 40 + len(lengths) * (16 * len(model.labels) + 64)
    estimate += reply_bytes(model.attention_kind, spec.layers, spec.heads, mode, max(lengths), len(lengths))
    if estimate > limit:
        raise ReplyTooLarge(
            f"reply: about {estimate} bytes for {len(lengths)} texts with {mode.name} attention, over "
            f"the limit of {limit} (max_reply_bytes; gRPC clients accept 4 MiB by default); ask for a "
            "smaller attention mode (POOLED, or NONE), fewer or shorter texts per request, or raise "
            "the client's receive limit and the server's max_reply_bytes"
        )


def _check_ids(model: LoadedModel, encoded: EncodedTexts) -> None:
    vocab, max_len = model.tokenizer.vocab_size, model.tokenizer.max_len
    for index, (row, length) in enumerate(zip(encoded.ids, encoded.lengths, strict=True)):
        if not 1 <= length <= max_len:
            raise InvalidArgument(
                f"input_ids row {index} has {length} tokens; each row needs 1 to {max_len}", field="input_ids"
            )
        values = np.asarray(row)
        if values.min() < 0 or values.max() >= vocab:
            raise InvalidArgument(
                f"input_ids row {index} holds ids outside the vocabulary [0, {vocab})", field="input_ids"
            )
