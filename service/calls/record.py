"""`Call`: what the call layer knows about one call, from arrival to answer.

The call layer (call.py) starts it with what the transport read before serving it (route,
deadline, span name, trace parent), admits it (its permit, and with it the `CallContext` the
engine receives) and ends it, counting it from what the record holds then. A plane, which
asks the engine itself, tells the record three things through its methods and writes
nothing else: the client's request id (`name_request`), the model version the call resolved
and its texts (`resolved`: a refusal after that counts under the version) and what the
engine returned (`answered`: the stage times of its spans).
"""

from __future__ import annotations

import time
from contextvars import Token

from attnserve.service.calls.route import Route
from attnserve.service.engine.context import CallContext
from attnserve.service.engine.metrics import ModelMetrics
from attnserve.service.engine.request.results import Outputs
from attnserve.service.errors import Internal
from attnserve.service.observe.logs import CallIds, bind_call
from attnserve.service.observe.tracing import CallTrace


class Call:
    __slots__ = (
        "admission",
        "counted",
        "deadline",
        "log_token",
        "method",
        "model",
        "outputs",
        "route",
        "started",
        "texts",
        "trace",
    )  # fmt: skip

    def __init__(self, route: Route, deadline: float | None, method: str = "") -> None:
        self.route = route
        self.deadline = deadline  # time.monotonic() value; None: the client set none
        self.started = time.perf_counter()
        self.method = method  # <service>/<method> or <HTTP method> <route>, when traced or logged
        self.trace: CallTrace | None = None  # its span, when traced (service/observe/tracing.py)
        self.log_token: Token[CallIds | None] | None = None  # its ids bound for log records
        self.counted = route.counted  # an inference call: counted in the request metrics
        # What the engine receives with the call: set once, by CallLayer.admit.
        self.admission: CallContext | None = None
        self.model: ModelMetrics | None = None  # the model version it resolved
        self.texts = 0
        self.outputs: Outputs | None = None  # what the engine returned: its stage times

    @property
    def context(self) -> CallContext:
        """What the engine receives with the call; only an admitted call has one."""
        if self.admission is None:
            raise Internal("the call was served before it was admitted")
        return self.admission

    def resolved(self, model: ModelMetrics, texts: int) -> None:
        """The model version the call resolved and the texts it carries."""
        self.model = model
        self.texts = texts

    def answered(self, outputs: Outputs) -> None:
        """What the engine returned for the call."""
        self.outputs = outputs

    def name_request(self, request_id: str) -> None:
        """The client's request id, in every log record of the rest of the call."""
        if request_id:
            token = bind_call(request_id, None if self.trace is None else self.trace.ids)
            if self.log_token is None:
                self.log_token = token
