"""What the request path returns: one result per level.

`BatchOutput` is one batch's (the runner computes it over the whole batch in a batcher
thread); `Outputs` is one call's, built once by `runner.gather` from the batches that
carried its rows, and returned by `Core.classify` to every plane.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from opentelemetry.trace.span import SpanContext

from attnserve.service.engine.models.tokenization import EncodedTexts

TopTokens = tuple[np.ndarray, np.ndarray]  # (indices, weights), largest first


@dataclass(slots=True)
class BatchOutput:
    """One batch's results, row by row (B rows, C classes)."""

    logits: np.ndarray  # [B, C] float32
    probabilities: np.ndarray  # [B, C] float32
    label_ids: np.ndarray  # [B] int64
    attention: list[np.ndarray | None] | None  # per row, in its call's mode, padding stripped
    top_tokens: list[TopTokens | None] | None  # per row
    span: SpanContext | None = None  # the batch's span, when a call in it is traced
    vectors: np.ndarray | None = None  # [B, D] the graph's `vector` rows, for a head that reads them


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


@dataclass(frozen=True, slots=True)
class Window:
    """One window of a long text read as windows (windows.py)."""

    start: int  # the [start, end) characters of the text it covers
    end: int
    probabilities: np.ndarray  # [C] its own scores
    weight: float  # its weight in the text's answer (the weights of a text's windows sum to 1)
    attribution: float | None = None  # occlusion: the drop of the text's label when it is left out


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
    windows: list[list[Window]] | None = None  # per text its windows, when the call read texts as windows
    vectors: np.ndarray | None = None  # [k, D] the rows' `vector` output, where a document head reads it

    def __len__(self) -> int:
        return len(self.label_ids)
