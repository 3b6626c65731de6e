"""Trace context the clients send: the caller's active OpenTelemetry span, as W3C headers.

An application that traces its own work (any OpenTelemetry SDK set up by it) gets the
server's spans in the same trace: each call adds `traceparent` (and `tracestate`, and
`baggage` when set) to its gRPC metadata. Without an active span nothing is added. The
process-wide propagator is used, so OTEL_PROPAGATORS is honoured. `attnserve-client` also
continues a trace handed to it in the TRACEPARENT / TRACESTATE environment variables.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from opentelemetry import context, propagate, trace

Metadata = tuple[tuple[str, str], ...]


def trace_headers() -> dict[str, str]:
    """The current span's context as headers (for HTTP calls); empty without an active span."""
    if not trace.get_current_span().get_span_context().is_valid:
        return {}
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier


def with_trace(metadata: Metadata) -> Metadata:
    """`metadata` plus the current span's context, for one gRPC call."""
    headers = trace_headers()
    return metadata + tuple(headers.items()) if headers else metadata


@contextmanager
def environment_trace(environ: Mapping[str, str] = os.environ) -> Iterator[None]:
    """Make TRACEPARENT (with TRACESTATE) from the environment the current context, if set."""
    parent = environ.get("TRACEPARENT")
    if not parent:
        yield
        return
    carrier = {"traceparent": parent, "tracestate": environ.get("TRACESTATE", "")}
    token = context.attach(propagate.extract(carrier))
    try:
        yield
    finally:
        context.detach(token)
