"""What the engine receives with a call besides its inputs: fixed when the call is admitted
(service/calls/), never written after."""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry.trace.span import SpanContext

from attnserve.service.engine.admission import Permit


@dataclass(frozen=True, slots=True)
class CallContext:
    permit: Permit  # taken at the edge; the engine runs only calls that hold a live one
    deadline: float | None = None  # time.monotonic() value; None: the client set none
    trace: SpanContext | None = None  # the call's span, when traced (service/observe/tracing.py)
