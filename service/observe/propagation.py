"""W3C trace context (`traceparent`, `tracestate`) read from call metadata.

gRPC metadata arrives as (key, value) pairs and HTTP headers as a mapping or ASGI's raw
(bytes, bytes) pairs; both are reduced to the two header values the W3C propagator reads.
A missing or malformed `traceparent` yields an empty context, so the call starts a trace.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry.context import Context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
_KEYS = (TRACEPARENT, TRACESTATE)
_W3C = TraceContextTextMapPropagator()
TraceParent = Context  # what the call layer is handed: the caller's span as the new span's parent


def _text(value: str | bytes) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value


def _carrier(pairs: Iterable[tuple[Any, Any]]) -> dict[str, str]:
    found: dict[str, str] = {}
    for key, value in pairs:
        name = _text(key).lower()
        if name in _KEYS and name not in found:
            found[name] = _text(value)
    return found


def extract_metadata(metadata: Iterable[tuple[Any, Any]] | None) -> Context | None:
    """The caller's context from gRPC invocation metadata; None when it sent none."""
    carrier = _carrier(metadata or ())
    return _W3C.extract(carrier) if TRACEPARENT in carrier else None


def extract_headers(headers: Mapping[str, str] | Iterable[tuple[bytes, bytes]]) -> Context | None:
    """The caller's context from HTTP headers (a mapping, or ASGI's raw header pairs)."""
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    carrier = _carrier(pairs)
    return _W3C.extract(carrier) if TRACEPARENT in carrier else None
