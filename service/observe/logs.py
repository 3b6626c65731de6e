"""Log records as text or JSON lines, each carrying its call's request, trace and span id.

    configure_logging("info", "json", worker="4711")      # at start-up, once per process
    token = bind_call(request_id, call_trace.ids)          # at call start, in the call's task
    ...                                                    # every record logged here carries the ids
    unbind_call(token)                                     # at call end
    access(transport="grpc", method="Classify", ...)       # the call's access line, if sampled

The call's ids live in a context variable: asyncio gives each call's task its own copy, so
records from concurrent calls never mix. uvicorn's and grpc's Python loggers are sent to the
same handler; grpc core's own C logs (GRPC_VERBOSITY) bypass Python and are not formatted.
"""

from __future__ import annotations

import json
import logging
import random
import sys
from collections.abc import Callable
from contextvars import ContextVar, Token
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from opentelemetry import trace

from attnserve.service.observe.settings import LogFormat

ACCESS_LOGGER = "attnserve.access"
# Loggers that libraries give handlers of their own; theirs are dropped so records reach the root's.
ROUTED_LOGGERS = (
    "uvicorn",
    "uvicorn.error",
    "uvicorn.access",
    "uvicorn.asgi",
    "grpc",
    "grpc.aio",
    "grpc._cython",
)


@dataclass(frozen=True, slots=True)
class CallIds:
    request_id: str
    trace_id: str = ""
    span_id: str = ""


_CALL: ContextVar[CallIds | None] = ContextVar("attnserve_call", default=None)


def bind_call(request_id: str, trace_ids: tuple[str, str] | None = None) -> Token[CallIds | None]:
    """Name the current call in every record logged from this task until `unbind_call`."""
    trace_id, span_id = trace_ids or ("", "")
    return _CALL.set(CallIds(request_id, trace_id, span_id))


def unbind_call(token: Token[CallIds | None]) -> None:
    _CALL.reset(token)


def current_call() -> CallIds | None:
    """The bound call; else the ids of an active OpenTelemetry span (code traced by its caller)."""
    bound = _CALL.get()
    if bound is not None:
        return bound
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return CallIds("", format(context.trace_id, "032x"), format(context.span_id, "016x"))


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message and the call's ids."""

    def __init__(self, worker: str = "") -> None:
        super().__init__()
        self.worker = worker

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        call = current_call()
        if call is not None:
            if call.request_id:
                line["request_id"] = call.request_id
            if call.trace_id:
                line["trace_id"], line["span_id"] = call.trace_id, call.span_id
        if self.worker:
            line["worker"] = self.worker
        fields = getattr(record, "access", None)
        if isinstance(fields, dict):
            line.update(fields)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """The readable line, with the call's ids appended when a call is bound."""

    def __init__(self, worker: str = "") -> None:
        prefix = f"worker {worker} " if worker else ""
        super().__init__(f"%(asctime)s {prefix}%(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        call = current_call()
        if call is None:
            return text
        ids = [f"request_id={call.request_id}"] if call.request_id else []
        if call.trace_id:
            ids += [f"trace_id={call.trace_id}", f"span_id={call.span_id}"]
        return f"{text} [{' '.join(ids)}]" if ids else text


def formatter(log_format: LogFormat, worker: str = "") -> logging.Formatter:
    return JsonFormatter(worker) if log_format == "json" else TextFormatter(worker)


def configure_logging(level: str, log_format: LogFormat = "text", worker: str = "") -> logging.Handler:
    """One stderr handler on the root logger; library loggers are routed through it."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(log_format, worker))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ROUTED_LOGGERS:
        routed = logging.getLogger(name)
        routed.handlers.clear()
        routed.propagate = True
    return handler


class AccessLog:
    """The one line per call (a sampled share of calls), logged on `attnserve.access` at INFO."""

    def __init__(
        self,
        sample: float,
        logger: logging.Logger | None = None,
        chance: Callable[[], float] = random.random,
    ) -> None:
        if not 0.0 <= sample <= 1.0:
            raise ValueError(f"access log sample must be in [0, 1], got {sample}")
        self.sample = sample
        self.logger = logger or logging.getLogger(ACCESS_LOGGER)
        self._chance = chance

    @property
    def enabled(self) -> bool:
        """False when no line can be written: the caller may skip gathering the fields."""
        return self.sample > 0.0 and self.logger.isEnabledFor(logging.INFO)

    def __call__(
        self,
        *,
        transport: str,
        method: str,
        model: str,
        version: int | str,
        texts: int,
        status: str,
        latency_s: float,
        queue_s: float | None = None,
    ) -> bool:
        """Log the call if sampled; True when a line was written."""
        if not self.enabled or (self.sample < 1.0 and self._chance() >= self.sample):
            return False
        fields = {
            "transport": transport,
            "method": method,
            "model": model,
            "version": str(version),
            "texts": texts,
            "status": status,
            "latency_ms": round(latency_s * 1000.0, 3),
            "queue_ms": None if queue_s is None else round(queue_s * 1000.0, 3),
        }
        queue = "-" if queue_s is None else f"{queue_s * 1000.0:.3f}"
        self.logger.info(
            "%s %s model=%s version=%s texts=%d status=%s latency_ms=%.3f queue_ms=%s",
            transport,
            method,
            model,
            version,
            texts,
            status,
            latency_s * 1000.0,
            queue,
            extra={"access": fields},
        )
        return True
