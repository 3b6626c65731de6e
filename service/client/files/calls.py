"""One batch of rows through the service: retried with exponential backoff while the server
is busy or away (RESOURCE_EXHAUSTED, UNAVAILABLE); a batch refused as too large for one
message is split in halves until it fits; a batch the server refuses as invalid is tried row
by row. So one bad or huge row is rejected with its reason and the others still classified."""

from __future__ import annotations

import random
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from attnserve.service.client.messages import MULTI_LABEL, REGRESSION, SINGLE_LABEL, ClientError, TextResult
from attnserve.service.client.windows import decisive
from attnserve.service.common.weights import importance

# Between a multi-label row's assigned labels, as training data files write them
# (training/data/multi_label.py); "" when none is assigned.
ASSIGNED_SEPARATOR = "|"
TRANSIENT = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED})
# Refusals of one text (empty, too long, ...) rather than of the call.
PER_ROW = frozenset({grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OUT_OF_RANGE})
# RESOURCE_EXHAUSTED also means "too big": a message over gRPC's limit (either side), a body
# over the server's max_message_bytes, a reply over its max_reply_bytes. The same call fails
# again, so it is split, not retried.
_TOO_LARGE = re.compile(
    r"message larger than max|^request body: \d+ bytes|^reply: about \d+ bytes", re.IGNORECASE
)


def too_large(exc: ClientError) -> bool:
    return exc.code is grpc.StatusCode.RESOURCE_EXHAUSTED and bool(_TOO_LARGE.search(exc.details))


@dataclass(frozen=True)
class Retry:
    tries: int = 6  # calls per batch, the first included
    first_wait: float = 0.2  # seconds, doubled after each try, with jitter
    longest_wait: float = 10.0


@dataclass(frozen=True)
class Outcome:
    """A batch's rows back in order: each a result or the reason it was rejected."""

    results: list[TextResult | None]
    reasons: list[str | None]
    retries: int


class GiveUp(Exception):
    """The service kept refusing a whole batch (or refused it for a reason no retry mends)."""


def with_retries(call: Callable[[], Any], retry: Retry, stop: threading.Event) -> tuple[Any, int]:
    """`call()` and the retries it took. A stopping run retries no more: what is left of it
    is for --resume, so Ctrl-C is not held up by a server that stays away."""
    wait = retry.first_wait
    for attempt in range(1, retry.tries + 1):
        try:
            return call(), attempt - 1
        except ClientError as exc:
            if exc.code not in TRANSIENT or too_large(exc) or attempt == retry.tries or stop.is_set():
                raise
        # Jitter: workers refused together do not come back together.
        stop.wait(wait * random.uniform(0.5, 1.0))
        wait = min(wait * 2, retry.longest_wait)
    raise AssertionError("unreachable")


def classify_batch(
    client: Any,
    texts: list[str | None],
    *,
    model: str,
    version: int,
    attention: str,
    retry: Retry,
    stop: threading.Event,
    long_text: str = "",
) -> Outcome:
    """Classify the batch's non-empty texts; rows without text are rejected without a call."""
    results: list[TextResult | None] = [None] * len(texts)
    reasons: list[str | None] = [None] * len(texts)
    todo = []
    for i, text in enumerate(texts):
        if not isinstance(text, str) or not text.strip():
            reasons[i] = (
                "no text: the text column is empty"
                if text is None or isinstance(text, str)
                else (f"the text column holds a {type(text).__name__}, not text")
            )
        else:
            todo.append(i)

    retries = 0

    def settle(indices: list[int]) -> None:
        nonlocal retries
        batch = [texts[i] for i in indices]
        try:
            reply, tried = with_retries(
                lambda: client.classify(
                    batch, model=model, version=version, attention=attention, long_text=long_text
                ),
                retry,
                stop,
            )
        except ClientError as exc:
            if not too_large(exc) and exc.code not in PER_ROW:
                raise GiveUp(f"{exc.code.name}: {exc.details}") from None
            if len(indices) == 1:
                alone = "too large for one call even alone: " if too_large(exc) else ""
                reasons[indices[0]] = f"{alone}{exc.code.name}: {exc.details}"
            elif too_large(exc):
                half = len(indices) // 2
                settle(indices[:half])
                settle(indices[half:])
            else:  # find the rows the server refuses, one call each
                for i in indices:
                    settle([i])
            return
        retries += tried
        for i, result in zip(indices, reply.results, strict=True):
            results[i] = result

    if todo:
        settle(todo)
    return Outcome(results, reasons, retries)


def added_columns(
    labels: list[str],
    prefix: str,
    with_attention: bool,
    cascade: bool = False,
    problem_type: str = SINGLE_LABEL,
    windows: bool = False,
) -> dict[str, str]:
    """The columns a row gains, each with its Arrow type: a single-label model's label and
    p_<label> per label; a multi-label model's p_<label> per label and `assigned` (the labels
    at or over their thresholds, joined with ASSIGNED_SEPARATOR as training data writes them);
    a regression model's `value`. ``cascade``: the rows say which member answered them;
    ``windows``: texts are read as windows, and each row says its decisive window's characters
    (`window`, "start:end" of the window with the largest weight) and how many it had."""
    names: dict[str, str] = {}
    if problem_type == REGRESSION:
        names[f"{prefix}value"] = "float64"
    else:
        if problem_type != MULTI_LABEL:
            names[f"{prefix}label"] = "string"
        names.update((f"{prefix}p_{label}", "float64") for label in labels)
        if problem_type == MULTI_LABEL:
            names[f"{prefix}assigned"] = "string"
    if cascade:
        names[f"{prefix}answered_by"] = "string"
    if windows:
        names.update({f"{prefix}window": "string", f"{prefix}windows": "int64"})
    if with_attention:
        names.update({f"{prefix}tokens": "list<string>", f"{prefix}attention": "list<float64>"})
    return names


def added_values(
    result: TextResult,
    labels: list[str],
    prefix: str,
    with_attention: bool,
    problem_type: str = SINGLE_LABEL,
    windows: bool = False,
) -> dict[str, Any]:
    values: dict[str, Any] = {}
    if problem_type == REGRESSION:
        values[f"{prefix}value"] = None if result.value is None else round(float(result.value), 6)
    else:
        if problem_type != MULTI_LABEL:
            values[f"{prefix}label"] = result.label
        for label, p in zip(labels, result.probabilities.tolist(), strict=True):
            values[f"{prefix}p_{label}"] = round(float(p), 6)
        if problem_type == MULTI_LABEL:
            values[f"{prefix}assigned"] = ASSIGNED_SEPARATOR.join(result.assigned)
    if result.answered_by:
        values[f"{prefix}answered_by"] = result.answered_by
    if windows:
        top = decisive(result.windows) if result.windows else None
        values[f"{prefix}window"] = f"{top.start}:{top.end}" if top else ""
        values[f"{prefix}windows"] = len(result.windows)
    if with_attention:
        values[f"{prefix}tokens"] = list(result.tokens)
        weights: list[float] = [] if result.attention is None else importance(result.attention).tolist()
        values[f"{prefix}attention"] = [round(float(w), 6) for w in weights]
    return values
