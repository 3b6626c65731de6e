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

from attnserve.service.common.vocabulary import AttentionMode, Attribution
from attnserve.service.engine.context import CallContext
from attnserve.service.engine.limits import CallLimits
from attnserve.service.engine.models.loading import LoadedModel
from attnserve.service.engine.models.tokenization import EncodedTexts
from attnserve.service.engine.request.attention import check_request
from attnserve.service.engine.request.attributing import Attributed, attribute, find_words
from attnserve.service.engine.request.attribution import NO_ATTRIBUTION, Explain, check_rows
from attnserve.service.engine.request.predictor import Predictor
from attnserve.service.engine.request.results import Outputs
from attnserve.service.engine.request.window_reading import read_windows
from attnserve.service.engine.request.windows import Documents, plan, whole_windows
from attnserve.service.errors import InvalidArgument, ReplyTooLarge
from attnserve.service.settings import LongText


@dataclass(frozen=True, slots=True)
class Inputs:
    """One call: `texts` to tokenize, or `encoded` rows of ids (padding removed)."""

    texts: Sequence[str] | None = None
    encoded: EncodedTexts | None = None
    mode: AttentionMode = AttentionMode.NONE
    top_k: int = 0
    explain: Explain = NO_ATTRIBUTION  # an attribution to compute beside the labels (attribution.py)
    long_text: LongText | None = None  # a text over max_len: truncate, reject or windows; None: the server's


@dataclass(frozen=True, slots=True)
class Prepared:
    """A call's texts, validated and tokenized for one model version."""

    encoded: EncodedTexts
    tokenize_seconds: float
    started: float  # perf_counter when the engine took the call
    documents: Documents | None = None  # texts read as windows: `encoded` holds their windows

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
    texts = inputs.texts
    count = len(texts) if texts is not None else len(inputs.encoded or ())
    limit = limits.max_texts_per_request
    if count == 0 or count > limit:  # the refusal is built off the common path
        _refuse_count(count, limit)
    attention = (0, 0)  # what the reply's attention holds per text: float32 arrays, token axes each
    if inputs.mode is not AttentionMode.NONE or inputs.top_k:  # asking no attention needs no check
        attention = check_request(model.attention_spec, inputs.mode, inputs.top_k, model.name)
    long_text = inputs.long_text or limits.long_text
    documents = None
    if texts is not None and long_text == "windows":
        documents = plan(*model.tokenizer.encode_windows(texts), model.tokenizer.windows.stride)
        encoded = documents.rows if documents.windowed else documents.whole
        if documents.windowed:
            _check_windowed(inputs)
        tokenize_seconds = time.perf_counter() - started
        model.metrics.tokenize.observe(tokenize_seconds)
    elif texts is not None:
        # The call's own choice, else the version's (the server's --long-text, set at load).
        reject = None if inputs.long_text is None else inputs.long_text == "reject"
        encoded = model.tokenizer.encode(texts, reject_long=reject)
        tokenize_seconds = time.perf_counter() - started
        model.metrics.tokenize.observe(tokenize_seconds)
    else:
        assert inputs.encoded is not None  # a count of 0 was refused above
        encoded = inputs.encoded
        _check_ids(model, encoded)
        tokenize_seconds = time.perf_counter() - started
    # A reply over max_reply_bytes is refused up front: built anyway, it would fail at a client
    # with the default receive limit after all the work. Per text besides attention: logits,
    # probabilities, tokens with their offsets and special flags, and framing.
    lengths = encoded.lengths
    estimate = sum(lengths) * 40 + len(lengths) * (16 * len(model.labels) + 64)
    arrays, axes = attention
    if arrays:  # an upper bound: V2 pads every text to the longest, hence no per-text sum
        estimate += 4 * arrays * max(lengths) ** axes * len(lengths)
    if estimate > limits.max_reply_bytes:
        _refuse_reply(estimate, len(lengths), inputs.mode, limits.max_reply_bytes)
    return Prepared(encoded, tokenize_seconds, started, documents)


async def run(predictor: Predictor, inputs: Inputs, limits: CallLimits, context: CallContext) -> Outputs:
    """Validate `inputs`, run them through the version's batcher and return the outputs."""
    model = predictor.model
    prepared = prepare(model, inputs, limits)
    explain = inputs.explain
    documents = prepared.documents
    if documents is not None and documents.windowed:  # its own attribution check, then its rows
        timing, cap = (prepared.tokenize_seconds, prepared.started), limits.max_attribution_rows
        mode, k = inputs.mode, inputs.top_k
        return await read_windows(predictor, documents, mode, k, explain, context, timing, cap)
    words = None
    # Refused before any row runs when a budget or the cap does not hold.
    if explain.method is not Attribution.NONE:
        words = await find_words(model, explain, prepared.encoded, limits.max_attribution_rows)
        check_rows(explain, len(prepared.encoded), sum(words.rows), limits.max_attribution_rows)
    outputs = await answer(predictor, prepared, inputs, context)
    if documents is not None:
        outputs.windows = whole_windows(documents, outputs)
    if words is not None:
        which = list(range(len(outputs)))
        replied = (outputs.label_ids, outputs.probabilities)
        lane = predictor.lane(inputs.mode, inputs.top_k)  # the graph that answered the texts
        attach(outputs, which, await attribute(predictor, explain, prepared.encoded, words, which, replied,
                                               context, lane))  # fmt: skip
    return outputs


async def answer(
    predictor: Predictor, prepared: Prepared, inputs: Inputs, context: CallContext, lane: int | None = None
) -> Outputs:
    """The call's texts through the version's batcher on `lane` (None: the one the reply needs,
    Predictor.lane): labels, probabilities, attention."""
    encoded = prepared.encoded
    if inputs.texts is not None and any(encoded.truncated):
        predictor.model.metrics.drift.observe_truncated(encoded.truncated)
    return await predictor.predict(
        encoded,
        inputs.mode,
        inputs.top_k,
        context,
        lane,
        tokenize=prepared.tokenize_seconds,
        started=prepared.started,
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


def _check_windowed(inputs: Inputs) -> None:
    """What a call whose texts run as several windows may ask besides labels (its attribution
    is checked by window_reading, off the loop, before any row runs)."""
    if inputs.mode not in (AttentionMode.NONE, AttentionMode.POOLED):
        raise InvalidArgument(
            f"attention: a text read as windows has one weight per token (POOLED) or none; "
            f"{inputs.mode.word} is not offered over windows",
            field="attention",
        )


def _refuse_count(count: int, limit: int) -> None:
    if count == 0:
        raise InvalidArgument("texts: at least one text is required", field="texts")
    if count > limit:
        raise InvalidArgument(f"texts: {count} texts in one request; the limit is {limit}", field="texts")


def _refuse_reply(estimate: int, count: int, mode: AttentionMode, limit: int) -> None:
    raise ReplyTooLarge(
        f"reply: about {estimate} bytes for {count} texts with {mode.name} attention, over "
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
