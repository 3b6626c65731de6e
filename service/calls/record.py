"""`Call`: what the call layer knows about one call, from arrival to answer.

The call layer (call.py) creates it when it serves a call, with what the transport read
before (route, deadline, span name), admits it into its `CallContext` (the permit; the
engine receives the context with the call and writes back the model version the call
resolved, its texts and its outputs) and ends it, counting it from what the record and its
context hold then. A plane reads the context to hand it to the engine and tells the record
one thing itself: the client's request id (`name_request`).
"""

from __future__ import annotations

import time
from contextvars import Token

from attnserve.service.calls.route import Route
from attnserve.service.engine.context import CallContext
from attnserve.service.observe.logs import CallIds, bind_call
from attnserve.service.observe.tracing import CallTrace


class Call:
    __slots__ = ("context", "counted", "log_token", "method", "route", "started", "trace")

    def __init__(self, route: Route, deadline: float | None, method: str = "") -> None:
        self.route = route
        self.started = time.perf_counter()
        self.method = method  # <service>/<method> or <HTTP method> <route>, when traced or logged
        self.trace: CallTrace | None = None  # its span, when traced (service/observe/tracing.py)
        self.log_token: Token[CallIds | None] | None = None  # its ids bound for log records
        self.counted = route.counted  # an inference call: counted in the request metrics
        # What the engine receives with the call: its permit is set when the call is admitted.
        self.context = CallContext(None, deadline)

    def name_request(self, request_id: str) -> None:
        """The client's request id, in every log record of the rest of the call."""
        if request_id:
            token = bind_call(request_id, None if self.trace is None else self.trace.ids)
            if self.log_token is None:
                self.log_token = token
