"""The server's limits, under the settings' own names, derived from the settings here only.

`CallLimits` is what one call may ask (the request path enforces it), `BatchLimits` what a
version's batching may hold (the batcher and its queue), `limits_info` what `ModelInfo`
reports to clients (the native plane, and so the JSON API, the client and loadtest, which
read it back). A name here is the setting's name; `max_delay_s` is `max_delay_ms` in the
unit the batcher counts in.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnserve.service.common.model_info import LimitsInfo
from attnserve.service.settings import LongText, Settings


@dataclass(frozen=True, slots=True)
class CallLimits:
    """The server's per-call limits the request path enforces."""

    max_texts_per_request: int
    max_reply_bytes: int
    max_attribution_rows: int = 512  # forward rows one call's attributions may take (within max_queue)
    long_text: LongText = "truncate"  # a text over max_len, where the call names no choice


@dataclass(frozen=True)
class BatchLimits:
    """What one version's batching may hold."""

    max_batch_size: int
    max_batch_tokens: int
    max_delay_s: float
    max_queue: int
    max_concurrent_batches: int


def call_limits(settings: Settings) -> CallLimits:
    return CallLimits(
        settings.max_texts_per_request,
        settings.max_reply_bytes,
        settings.attribution_rows,
        settings.long_text,
    )


def batch_limits(settings: Settings) -> BatchLimits:
    return BatchLimits(
        max_batch_size=settings.max_batch_size,
        max_batch_tokens=settings.max_batch_tokens,
        max_delay_s=settings.max_delay_ms / 1000.0,
        max_queue=settings.max_queue,
        max_concurrent_batches=settings.max_concurrent_batches,
    )


def limits_info(settings: Settings) -> LimitsInfo:
    """The limits every front end reports with a model."""
    return LimitsInfo(
        max_texts_per_request=settings.max_texts_per_request,
        max_text_chars=settings.max_text_chars,
        max_batch_size=settings.max_batch_size,
        max_batch_tokens=settings.max_batch_tokens,
        long_text=settings.long_text,
    )
