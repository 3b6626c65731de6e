"""What the engine receives with a call besides its inputs: fixed when the call is admitted
(service/calls/), never written after; `Core.classify` hands the request path a copy that
says whether the call came alone (the lone path's one reading of the server's counts)."""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry.trace.span import SpanContext

from attnserve.service.engine.admission import Permit


@dataclass(frozen=True, slots=True)
class CallContext:
    permit: Permit  # taken at the edge; the engine runs only calls that hold a live one
    deadline: float | None = None  # time.monotonic() value; None: the client set none
    trace: SpanContext | None = None  # the call's span, when traced (service/observe/tracing.py)
    alone: bool = False  # no other call was in the server when the engine took this one
