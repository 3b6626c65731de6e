"""One batch through the model: the session's run (padding its rows), scores and attention extraction.

The batcher hands a `Batch` of rows (each a text of some call's `CallRows`) to `Runner`,
in a batcher thread; the runner returns one `BatchOutput` for the whole batch, computed
with numpy over the batch (probabilities, labels, pooled attention), and `gather` later
builds the call's `Outputs` from the batches that carried its rows (results.py). Probabilities are
what the bundle's scoring says (service/bundle/scoring.py): softmax(logits / T) with the
version's calibrated temperature (1 for a bundle without one), a sigmoid per label for a
multi-label model, the value for a regression model; the logits stay the graph's own.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from opentelemetry.trace.span import SpanContext

from attnserve.service.bundle import AttentionKind, Problem
from attnserve.service.bundle.calibration import softmax
from attnserve.service.common.vocabulary import AttentionMode
from attnserve.service.common.weights import importance
from attnserve.service.engine.metrics import GRAPHS
from attnserve.service.engine.models.loading import LoadedModel
from attnserve.service.engine.models.tokenization import EncodedTexts, TokenIds
from attnserve.service.engine.request.attention import as_layers, extract, top_k
from attnserve.service.engine.request.queue import Batch, Job, Row
from attnserve.service.engine.request.results import BatchOutput, EngineTimings, Outputs, TopTokens
from attnserve.service.observe.tracing import Tracing, trace_batch


@dataclass(frozen=True, slots=True)
class CallRows:
    """What a call's rows hold: token ids per text and what to extract for them."""

    ids: Sequence[TokenIds]
    mode: AttentionMode
    top_k: int
    trace: SpanContext | None = None  # the call's span: parent or link of its batches' span
    wants_attention: bool = False  # mode or top_k asks for it (set by the predictor, once a call)


ATTENTION_LANE = 0  # model.onnx: logits and attention
LABEL_LANE = 1  # label.onnx: logits only (a version that has one)


class Runner:
    """Runs batches of one model version's session (called from batcher threads); with a
    `tracing`, a batch that carries a traced call gets a span."""

    def __init__(self, model: LoadedModel, tracing: Tracing | None = None) -> None:
        self.run_session = model.runtime.run_rows
        self.run_labels = model.session_for(attention=False).run_rows  # the label graph, where there is one
        self.attention_kind = model.attention_kind
        self.pad_id = model.manifest.pad_id
        self.temperature = model.temperature
        scoring = model.scoring
        # A single-label model's scores are the softmax itself: one call fewer per batch.
        self.scores = softmax if scoring.problem is Problem.SINGLE_LABEL else scoring.probabilities
        self.metrics = model.metrics
        self.tracing = tracing
        # Only a version whose document head reads the windows' vectors fetches them, every batch.
        policy = model.manifest.long_texts
        self.vectors = policy is not None and policy.reads_vectors

    def __call__(self, batch: Batch) -> BatchOutput:
        started = time.perf_counter()
        rows = batch.rows
        requests: list[CallRows] = []
        texts: list[TokenIds] = []
        want_attention = False
        for row in rows:  # each row's call and token ids, in one pass
            request = row.job.payload
            requests.append(request)
            texts.append(request.ids[row.index])
            want_attention = want_attention or request.wants_attention
        # A label-lane batch asks no attention (Predictor.lane): the label graph answers it.
        run = self.run_labels if batch.lane == LABEL_LANE else self.run_session
        # The session pads the rows to the batch's width; the drift reads the ids and mask it fed.
        outputs, ids, mask = run(texts, self.pad_id, batch.width, want_attention, self.vectors)
        logits = outputs[0]  # [B, C]
        # Neither a temperature nor a sigmoid moves the top label: it is the logits' argmax.
        result = BatchOutput(logits, self.scores(logits, self.temperature), logits.argmax(axis=1), None, None)
        if self.vectors:
            result.vectors = outputs[-1]
        if want_attention:
            self._attention(result, as_layers(outputs[1], self.attention_kind), rows, requests)
        m = self.metrics
        m.batch_size.observe(len(rows))
        m.batch_tokens.observe(batch.tokens)
        m.padding_ratio.observe(1.0 - batch.real / batch.tokens)
        m.graph_batches[GRAPHS[batch.lane]].inc()  # lanes in the metrics' graph order
        ended = time.perf_counter()
        m.inference.observe(ended - started)
        m.drift.observe_batch(result.probabilities, ids, mask, result.label_ids)
        if self.tracing is not None:
            result.span = self._trace(self.tracing, batch, requests, started, ended)
        return result

    def _trace(
        self, tracing: Tracing, batch: Batch, requests: list[CallRows], started: float, ended: float
    ) -> SpanContext | None:
        """The batch's span, when a call in it is traced."""
        traces = [r.trace for r in requests]
        if not any(traces):
            return None
        m = self.metrics
        return trace_batch(
            tracing,
            traces,
            started,
            ended,
            {
                "attnserve.model": m.name,
                "attnserve.model.version": int(m.version),
                "attnserve.batch.size": len(batch.rows),
                "attnserve.batch.tokens": batch.tokens,
                "attnserve.batch.padding_ratio": round(1.0 - batch.real / batch.tokens, 4),
            },
        )

    def _attention(
        self, result: BatchOutput, layers: np.ndarray, rows: list[Row], requests: list[CallRows]
    ) -> None:
        """Per-row attention and top tokens; the pooled map is computed once for the batch."""
        pooled: np.ndarray | None = None
        if self.attention_kind != AttentionKind.POOL:
            pooled = layers[:, -1].mean(axis=1)  # [B, T, T]: last layer, heads averaged
        attention: list[np.ndarray | None] = [None] * len(rows)
        top: list[TopTokens | None] = [None] * len(rows)
        for i, (row, request) in enumerate(zip(rows, requests, strict=True)):
            if not request.wants_attention:
                continue
            n = row.length
            mode = request.mode if request.mode != AttentionMode.NONE else AttentionMode.POOLED
            if mode == AttentionMode.POOLED and pooled is not None:
                weights = pooled[i, :n, :n]
            else:
                weights = extract(layers, self.attention_kind, i, n, mode)
            if request.mode != AttentionMode.NONE:
                attention[i] = weights
            if request.top_k:
                top[i] = top_k(importance(weights), request.top_k)
        result.attention, result.top_tokens = attention, top


_EMPTY_TOP: TopTokens = (np.zeros(0, np.int64), np.zeros(0, np.float32))


def gather(
    job: Job, request: CallRows, encoded: EncodedTexts, tokenize: float = 0.0, started: float = 0.0
) -> Outputs:
    """A finished call's result, its rows picked out of its batches' outputs in request order
    (`tokenize`: seconds its texts took to tokenize; `started`: when the engine took it)."""
    timings = EngineTimings(
        tokenize,
        job.queue_seconds,
        job.run_seconds,
        started=started,
        enqueued=job.enqueued,
        ran_until=job.ran_until,
    )
    parts = job.parts
    if len(parts) == 1:  # one text: views into the batch's arrays
        out, position, _ = parts[0]
        pick = slice(position, position + 1)
        attention = [out.attention[position]] if request.mode != AttentionMode.NONE else None
        top = [out.top_tokens[position] or _EMPTY_TOP] if request.top_k else None
        spans = (out.span,) if out.span is not None and request.trace is not None else ()
        return Outputs(
            encoded,
            out.logits[pick],
            out.probabilities[pick],
            out.label_ids[pick],
            attention,
            top,
            timings,
            spans,
            vectors=None if out.vectors is None else out.vectors[pick],
        )
    first = parts[0][0]
    size, classes = job.size, first.logits.shape[1]
    logits = np.empty((size, classes), np.float32)
    probabilities = np.empty((size, classes), np.float32)
    label_ids = np.empty(size, np.int64)
    attention_rows: list[np.ndarray] = [first.logits[:0]] * size
    top_rows: list[TopTokens] = [_EMPTY_TOP] * size
    by_output: dict[int, tuple[BatchOutput, list[int], list[int]]] = {}
    for out, position, index in parts:
        entry = by_output.setdefault(id(out), (out, [], []))
        entry[1].append(position)
        entry[2].append(index)
        if out.attention is not None and out.attention[position] is not None:
            attention_rows[index] = out.attention[position]
        if out.top_tokens is not None:
            top_rows[index] = out.top_tokens[position] or _EMPTY_TOP
    vectors = None if first.vectors is None else np.empty((size, first.vectors.shape[1]), np.float32)
    for out, positions, indices in by_output.values():
        logits[indices] = out.logits[positions]
        probabilities[indices] = out.probabilities[positions]
        label_ids[indices] = out.label_ids[positions]
        if vectors is not None and out.vectors is not None:
            vectors[indices] = out.vectors[positions]
    return Outputs(
        encoded,
        logits,
        probabilities,
        label_ids,
        attention_rows if request.mode != AttentionMode.NONE else None,
        top_rows if request.top_k else None,
        timings,
        _batch_spans(by_output.values()) if request.trace is not None else (),
        vectors=vectors,
    )


def _batch_spans(outputs: Iterable[tuple[BatchOutput, list[int], list[int]]]) -> tuple[SpanContext, ...]:
    return tuple(out.span for out, _, _ in outputs if out.span is not None)
