"""OpenTelemetry traces of the server: a span per call, child spans per stage, one per batch.

    tracing = Tracing.from_settings(settings)          # None while --tracing is off
    call = tracing.start_call("attnserve.v1.Classifier/Classify", protocol="native", transport="grpc",
                              parent=extract_metadata(metadata))   # None when not sampled
    call.stage("tokenize", started, ended)                # perf_counter seconds
    call.finish("OK", {"attnserve.texts": 2})

Stage spans are written after the fact from the times the engine already measures, so the
request path holds no open span and takes no context switch. A batch serves calls from many
traces: it gets one span, a child of the first sampled call it carries, linked to every
call's span; each call's `attnserve.inference` span links back to it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import Span, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import Link, SpanKind, Status, StatusCode, Tracer, set_span_in_context
from opentelemetry.trace.span import NonRecordingSpan, SpanContext
from opentelemetry.util.types import AttributeValue

from attnserve.service.observe.settings import ObserveSettings, OtlpProtocol

DEFAULT_SERVICE_NAME = "attnserve"
Attributes = Mapping[str, AttributeValue]
# OTEL_TRACES_SAMPLER values with a fixed ratio; the ratio samplers read OTEL_TRACES_SAMPLER_ARG.
_FIXED_SAMPLERS = {
    "always_on": 1.0,
    "parentbased_always_on": 1.0,
    "always_off": 0.0,
    "parentbased_always_off": 0.0,
}
_RATIO_SAMPLERS = {"", "traceidratio", "parentbased_traceidratio"}


Clock = Callable[[], float]
# Per clock: (wall-clock ns at its zero, when that was measured). One offset serves every
# conversion for a second, so the spans of one call keep exact relative times; refreshing it
# follows steps of the wall clock.
_OFFSETS: dict[Clock, tuple[int, float]] = {}
_REFRESH_S = 1.0
_BRACKET_S = 20e-6  # an offset read across a longer pause (a preempted thread) is read again


# Where perf_counter is the monotonic clock (Linux, macOS), one offset serves both, so spans
# from the batcher's monotonic readings and the call's perf_counter ones line up exactly.
_SAME_CLOCK = (
    time.get_clock_info("monotonic").implementation == time.get_clock_info("perf_counter").implementation
)
_ALIASES: dict[Clock, Clock] = {time.monotonic: time.perf_counter} if _SAME_CLOCK else {}


def _offset(clock: Clock) -> int:
    for _ in range(3):
        before = clock()
        wall = time.time_ns()
        after = clock()
        if after - before <= _BRACKET_S:
            break
    return wall - int((before + after) * 5e8)


def epoch_ns(seconds: float, clock: Clock = time.perf_counter) -> int:
    """A reading of `clock` (perf_counter, or monotonic as the batcher keeps) as the wall-clock
    nanoseconds spans carry."""
    clock = _ALIASES.get(clock, clock)
    now = clock()
    entry = _OFFSETS.get(clock)
    if entry is None or now - entry[1] > _REFRESH_S:
        entry = _OFFSETS[clock] = (_offset(clock), now)
    return entry[0] + int(seconds * 1e9)


@dataclass(frozen=True)
class TracingConfig:
    """Where and how much to export; `endpoint` None lets the exporter read OTEL_* itself."""

    protocol: OtlpProtocol = "grpc"
    endpoint: str | None = None
    sample_ratio: float = 1.0

    @classmethod
    def resolve(cls, settings: ObserveSettings, environ: Mapping[str, str] = os.environ) -> TracingConfig:
        protocol = settings.otlp_protocol or (
            environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
            or "grpc"
        )
        if protocol not in ("grpc", "http/protobuf"):
            raise ValueError(f"OTLP protocol {protocol!r} is not supported: use grpc or http/protobuf")
        ratio = settings.trace_sample_ratio
        return cls(
            protocol="grpc" if protocol == "grpc" else "http/protobuf",
            endpoint=_http_traces_url(settings.otlp_endpoint, protocol),
            sample_ratio=_environment_ratio(environ) if ratio is None else ratio,
        )


def _http_traces_url(endpoint: str | None, protocol: str) -> str | None:
    """An http/protobuf endpoint given as a bare address gets the standard /v1/traces path."""
    if endpoint is None or protocol != "http/protobuf" or urlsplit(endpoint).path not in ("", "/"):
        return endpoint
    return endpoint.rstrip("/") + "/v1/traces"


def _environment_ratio(environ: Mapping[str, str]) -> float:
    sampler = environ.get("OTEL_TRACES_SAMPLER", "").strip().lower()
    if sampler in _FIXED_SAMPLERS:
        return _FIXED_SAMPLERS[sampler]
    argument = environ.get("OTEL_TRACES_SAMPLER_ARG", "").strip()
    if sampler not in _RATIO_SAMPLERS or not argument:
        return 1.0
    try:
        ratio = float(argument)
    except ValueError:
        raise ValueError(f"OTEL_TRACES_SAMPLER_ARG={argument!r} is not a number in [0, 1]") from None
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"OTEL_TRACES_SAMPLER_ARG={argument!r} is not a number in [0, 1]")
    return ratio


def otlp_exporter(config: TracingConfig) -> SpanExporter:
    if config.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        return GrpcExporter(endpoint=config.endpoint)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

    return HttpExporter(endpoint=config.endpoint)


def _resource(environ: Mapping[str, str]) -> Resource:
    # Resource.create reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; name the service
    # only where neither did.
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(
            Resource({SERVICE_NAME: environ.get("OTEL_SERVICE_NAME") or DEFAULT_SERVICE_NAME})
        )
    return resource


class Tracing:
    """The server's own tracer provider (never the process-global one), its exporter thread."""

    def __init__(self, config: TracingConfig, *, environ: Mapping[str, str] = os.environ) -> None:
        self.config = config
        self.provider = TracerProvider(
            sampler=ParentBased(root=TraceIdRatioBased(config.sample_ratio)), resource=_resource(environ)
        )
        self.provider.add_span_processor(BatchSpanProcessor(otlp_exporter(config)))
        self.tracer: Tracer = self.provider.get_tracer("attnserve.service")
        self._stopped = False

    @classmethod
    def from_settings(
        cls, settings: ObserveSettings, environ: Mapping[str, str] = os.environ
    ) -> Tracing | None:
        return cls(TracingConfig.resolve(settings, environ), environ=environ) if settings.tracing else None

    def start_call(
        self,
        name: str,
        *,
        protocol: str,
        transport: str,
        parent: Context | None = None,
        attributes: Attributes | None = None,
        started: float | None = None,
    ) -> CallTrace | None:
        """The span of one call (`started`: perf_counter seconds, default now); None when unsampled."""
        span = self.tracer.start_span(
            name,
            context=parent,
            kind=SpanKind.SERVER,
            attributes={
                "attnserve.protocol": protocol,
                "attnserve.transport": transport,
                **(attributes or {}),
            },
            start_time=None if started is None else epoch_ns(started),
        )
        if not span.is_recording():
            return None
        return CallTrace(self.tracer, span)  # type: ignore[arg-type]  # the SDK's tracer makes SDK spans

    def force_flush(self, timeout_s: float = 5.0) -> bool:
        return self.provider.force_flush(int(timeout_s * 1000))

    def shutdown(self) -> None:
        """Export what is buffered and stop the exporter thread (server shutdown; once)."""
        if not self._stopped:
            self._stopped = True
            self.provider.shutdown()


class CallTrace:
    """One sampled call: its span and the stage spans written under it."""

    __slots__ = ("_context", "_tracer", "span")

    def __init__(self, tracer: Tracer, span: Span) -> None:
        self._tracer = tracer
        self.span = span
        self._context = set_span_in_context(span)

    @property
    def span_context(self) -> SpanContext:
        """What the engine carries with the call's texts, so the batch span can name it."""
        return self.span.get_span_context()

    @property
    def ids(self) -> tuple[str, str]:
        """(trace id, span id) in hex, as logs show them."""
        context = self.span.get_span_context()
        return format(context.trace_id, "032x"), format(context.span_id, "016x")

    def stage(
        self,
        name: str,
        started: float,
        ended: float,
        attributes: Attributes | None = None,
        links: Sequence[SpanContext] = (),
        clock: Clock = time.perf_counter,
        start_clock: Clock | None = None,
    ) -> None:
        """A finished child span from `clock` times (`start_clock`: the clock of `started`, when
        another): parse, tokenize, queue, reply, ..."""
        span = self._tracer.start_span(
            f"attnserve.{name}",
            context=self._context,
            attributes=attributes,
            links=[Link(c) for c in links],
            start_time=epoch_ns(started, start_clock or clock),
        )
        span.end(end_time=epoch_ns(ended, clock))

    def set(self, attributes: Attributes) -> None:
        self.span.set_attributes(attributes)

    def finish(self, code: str, attributes: Attributes | None = None, ended: float | None = None) -> None:
        """End the call span with its gRPC status name (`OK`, `INVALID_ARGUMENT`, ...)."""
        span = self.span
        span.set_attribute("attnserve.status", code)
        if attributes:
            span.set_attributes(attributes)
        if code != "OK":
            span.set_status(Status(StatusCode.ERROR, code))
        span.end(end_time=None if ended is None else epoch_ns(ended))


def trace_batch(
    tracing: Tracing,
    calls: Sequence[SpanContext | None],
    started: float,
    ended: float,
    attributes: Attributes | None = None,
    clock: Clock = time.perf_counter,
) -> SpanContext | None:
    """The one span of a finished batch (`clock` times); None when no call in it is traced.

    `calls` holds each row's call span context (None for untraced calls; repeats are fine).
    """
    traced: dict[int, SpanContext] = {}  # one link per call, however many of its texts the batch holds
    for context in calls:
        if context is not None:
            traced.setdefault(context.span_id, context)
    if not traced:
        return None
    span = tracing.tracer.start_span(
        "attnserve.batch",
        context=set_span_in_context(NonRecordingSpan(next(iter(traced.values())))),
        kind=SpanKind.INTERNAL,
        attributes=attributes,
        links=[Link(c) for c in traced.values()],
        start_time=epoch_ns(started, clock),
    )
    span.end(end_time=epoch_ns(ended, clock))
    return span.get_span_context()
