"""What the engine receives with a call besides its inputs, and what it tells the call layer
back. The call layer (service/calls/) creates it with the call and admits the call into it
(its permit, taken at the edge); the engine reads the permit, deadline and trace, notes
whether the call came alone (the lone path's one reading of the server's counts) and writes
what the call layer counts the call under when it ends: the model version it resolved, its
texts and its outputs. The engine never calls up; the call layer reads these fields."""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry.trace.span import SpanContext

from attnserve.service.engine.admission import Permit
from attnserve.service.engine.models.loading import LoadedModel
from attnserve.service.engine.request.results import Outputs


@dataclass(slots=True)
class CallContext:
    permit: Permit | None  # taken at the edge (None: not admitted); the engine runs only live ones
    deadline: float | None = None  # time.monotonic() value; None: the client set none
    trace: SpanContext | None = None  # the call's span, when traced (service/observe/tracing.py)
    alone: bool = False  # no other call was in the server when the engine took this one
    # Written by the engine, read by the call layer when the call ends:
    model: LoadedModel | None = None  # the version the call resolved (a refusal after counts under it)
    texts: int = 0  # the texts the call carries
    outputs: Outputs | None = None  # what the engine returned: its stage times
