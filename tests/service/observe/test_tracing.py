"""Traces through the real OTLP exporters (gRPC and HTTP/protobuf) into a real OTLP receiver."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from attnserve.service.observe.propagation import extract_headers, extract_metadata
from attnserve.service.observe.settings import ObserveSettings
from attnserve.service.observe.tracing import Tracing, TracingConfig, trace_batch
from kit.otlp import OtlpReceiver, ReceivedSpan

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
SAMPLED = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
UNSAMPLED = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-00"


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as running:
        yield running


def _tracing(receiver: OtlpReceiver, protocol: str, ratio: float = 1.0) -> Tracing:
    endpoint = receiver.grpc_endpoint if protocol == "grpc" else receiver.http_endpoint
    return Tracing(TracingConfig(protocol=protocol, endpoint=endpoint, sample_ratio=ratio))  # type: ignore[arg-type]


def _by_trace(spans: list[ReceivedSpan], trace_id: str) -> dict[str, list[ReceivedSpan]]:
    named: dict[str, list[ReceivedSpan]] = {}
    for span in spans:
        if span.trace_id == trace_id:
            named.setdefault(span.name, []).append(span)
    return named


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_a_call_its_stages_and_its_batch_reach_the_receiver(receiver: OtlpReceiver, protocol: str) -> None:
    tracing = _tracing(receiver, protocol)
    try:
        t0 = time.perf_counter()
        first = tracing.start_call(
            "attnserve.v1.Classifier/Classify",
            protocol="native",
            transport="grpc",
            parent=extract_metadata([("authorization", "Bearer x"), ("traceparent", SAMPLED)]),
            attributes={"attnserve.model": "car", "attnserve.model.version": 1},
            started=t0,
        )
        second = tracing.start_call("POST /v2/models/car/infer", protocol="v2", transport="http", started=t0)
        assert first is not None and second is not None
        first.stage("parse", t0, t0 + 0.0001)
        first.stage("tokenize", t0 + 0.0001, t0 + 0.0002, {"attnserve.tokens": 12})
        first.stage("queue", t0 + 0.0002, t0 + 0.0005)
        batch = trace_batch(
            tracing,
            [first.span_context, second.span_context, first.span_context],
            t0 + 0.0005,
            t0 + 0.0015,
            {"attnserve.batch.size": 3, "attnserve.batch.tokens": 36},
        )
        assert batch is not None
        for call in (first, second):
            call.stage("inference", t0 + 0.0005, t0 + 0.0015, links=[batch])
            call.stage("reply", t0 + 0.0015, t0 + 0.0016)
        first.finish("OK", {"attnserve.texts": 2}, ended=t0 + 0.002)
        second.finish("RESOURCE_EXHAUSTED")
        assert tracing.force_flush()
    finally:
        tracing.shutdown()
    transport = "grpc" if protocol == "grpc" else "http"
    own = [s for s in receiver.spans if s.transport == transport]
    mine = _by_trace(own, CLIENT_TRACE)
    assert sorted(mine) == sorted(
        [
            "attnserve.v1.Classifier/Classify",
            "attnserve.parse",
            "attnserve.tokenize",
            "attnserve.queue",
            "attnserve.batch",
            "attnserve.inference",
            "attnserve.reply",
        ]
    )
    (served,) = mine["attnserve.v1.Classifier/Classify"]
    assert served.parent_span_id == CLIENT_SPAN, "the call continues the caller's trace"
    assert served.kind == "SPAN_KIND_SERVER"
    assert served.attributes == {
        "attnserve.protocol": "native",
        "attnserve.transport": "grpc",
        "attnserve.model": "car",
        "attnserve.model.version": 1,
        "attnserve.status": "OK",
        "attnserve.texts": 2,
    }
    assert served.status == "STATUS_CODE_UNSET"
    assert served.resource["service.name"] == "attnserve"
    assert served.end_ns - served.start_ns == pytest.approx(2_000_000, abs=100_000)
    for name in (
        "attnserve.parse",
        "attnserve.tokenize",
        "attnserve.queue",
        "attnserve.inference",
        "attnserve.reply",
    ):
        (stage,) = mine[name]
        assert stage.parent_span_id == served.span_id, name
        assert served.start_ns <= stage.start_ns <= stage.end_ns <= served.end_ns, name
    assert mine["attnserve.tokenize"][0].attributes == {"attnserve.tokens": 12}
    (batch_span,) = mine["attnserve.batch"]
    assert batch_span.parent_span_id == served.span_id, "the batch is a child of the first traced call"
    # The other call started its own trace; the batch links both calls once each.
    (other,) = [s for s in own if s.name == "POST /v2/models/car/infer"]
    assert other.trace_id != CLIENT_TRACE and other.parent_span_id == ""
    assert other.status == "STATUS_CODE_ERROR" and other.status_message == "RESOURCE_EXHAUSTED"
    assert batch_span.links == [(CLIENT_TRACE, served.span_id), (other.trace_id, other.span_id)]
    assert batch_span.attributes == {"attnserve.batch.size": 3, "attnserve.batch.tokens": 36}
    other_inference = [s for s in own if s.trace_id == other.trace_id and s.name == "attnserve.inference"]
    for inference in [mine["attnserve.inference"][0], *other_inference]:
        assert inference.links == [(CLIENT_TRACE, batch_span.span_id)], "every call links to its batch"


def test_sampling_ratio_applies_to_new_traces_and_callers_decide_their_own(receiver: OtlpReceiver) -> None:
    tracing = _tracing(receiver, "grpc", ratio=0.0)
    try:
        assert tracing.start_call("c", protocol="native", transport="grpc") is None, (
            "ratio 0: a call without traceparent is not traced"
        )
        unsampled = extract_headers([(b"traceparent", UNSAMPLED.encode())])
        assert tracing.start_call("c", protocol="v2", transport="http", parent=unsampled) is None
        sampled = tracing.start_call(
            "sampled-by-caller",
            protocol="v2",
            transport="http",
            parent=extract_headers({"traceparent": SAMPLED}),
        )
        assert sampled is not None
        assert sampled.ids == (CLIENT_TRACE, sampled.ids[1])
        assert trace_batch(tracing, [None, None], 0.0, 1.0) is None, "a batch of untraced calls has no span"
        sampled.finish("OK")
        tracing.force_flush()
    finally:
        tracing.shutdown()
    received = receiver.wait_for(lambda spans: any(s.name == "sampled-by-caller" for s in spans))
    assert not [s for s in received if s.name == "c"]


def test_half_sampling_traces_about_half_the_calls(receiver: OtlpReceiver) -> None:
    tracing = _tracing(receiver, "grpc", ratio=0.5)
    try:
        traced = sum(
            tracing.start_call("ratio", protocol="native", transport="grpc") is not None for _ in range(2000)
        )
    finally:
        tracing.shutdown()
    assert 800 < traced < 1200  # binomial(2000, 0.5): 1000 +- 9 standard deviations


def test_malformed_traceparent_starts_a_new_trace(receiver: OtlpReceiver) -> None:
    tracing = _tracing(receiver, "grpc")
    try:
        parent = extract_metadata([("traceparent", "00-zz-not-a-trace-01")])
        call = tracing.start_call("malformed", protocol="native", transport="grpc", parent=parent)
        assert call is not None and call.ids[0] != CLIENT_TRACE
        call.finish("OK")
    finally:
        tracing.shutdown()
    assert extract_metadata([("authorization", "Bearer x")]) is None
    assert extract_headers({"content-type": "application/json"}) is None


def test_settings_default_to_the_standard_otel_variables(
    receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.http_endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "1")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "attnserve-eu-1")
    tracing = Tracing.from_settings(ObserveSettings.model_validate({"tracing": True}))
    assert tracing is not None
    assert tracing.config == TracingConfig(protocol="http/protobuf", endpoint=None, sample_ratio=1.0)
    try:
        call = tracing.start_call("from-environment", protocol="native", transport="grpc")
        assert call is not None
        call.finish("OK")
    finally:
        tracing.shutdown()
    (span,) = receiver.wait_for(lambda spans: any(s.name == "from-environment" for s in spans)) and [
        s for s in receiver.spans if s.name == "from-environment"
    ]
    assert span.transport == "http" and span.resource["service.name"] == "attnserve-eu-1"


def test_settings_win_over_the_environment_and_bad_values_are_refused() -> None:
    environ = {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_TRACES_SAMPLER_ARG": "0.5"}
    settings = ObserveSettings.model_validate(
        {
            "tracing": True,
            "otlp_protocol": "http/protobuf",
            "otlp_endpoint": "http://collector:4318",
            "trace_sample_ratio": 0.01,
        }
    )
    assert TracingConfig.resolve(settings, environ) == TracingConfig(
        protocol="http/protobuf", endpoint="http://collector:4318/v1/traces", sample_ratio=0.01
    )
    assert TracingConfig.resolve(ObserveSettings.model_validate({}), environ).sample_ratio == 0.5
    assert (
        TracingConfig.resolve(
            ObserveSettings.model_validate({}), {"OTEL_TRACES_SAMPLER": "always_off"}
        ).sample_ratio
        == 0.0
    )
    assert TracingConfig.resolve(ObserveSettings.model_validate({}), {}) == TracingConfig("grpc", None, 1.0)
    assert Tracing.from_settings(ObserveSettings.model_validate({})) is None, "tracing is off by default"
    with pytest.raises(ValueError, match="OTEL_TRACES_SAMPLER_ARG='2'"):
        TracingConfig.resolve(ObserveSettings.model_validate({}), {"OTEL_TRACES_SAMPLER_ARG": "2"})
    with pytest.raises(ValueError, match="'http/json' is not supported"):
        TracingConfig.resolve(
            ObserveSettings.model_validate({}), {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}
        )


def test_stage_and_batch_times_may_come_from_the_monotonic_clock(receiver: OtlpReceiver) -> None:
    tracing = _tracing(receiver, "grpc")
    try:
        p0, m0 = time.perf_counter(), time.monotonic()
        call = tracing.start_call("clocks", protocol="native", transport="grpc", started=p0)
        assert call is not None
        batch = trace_batch(tracing, [call.span_context], m0 + 0.001, m0 + 0.002, clock=time.monotonic)
        assert batch is not None
        call.stage("queue", m0, m0 + 0.001, clock=time.monotonic)
        call.finish("OK", ended=p0 + 0.003)
    finally:
        tracing.shutdown()
    spans = receiver.wait_for(lambda got: sum(s.trace_id == call.ids[0] for s in got) == 3)
    mine = {s.name: s for s in spans if s.trace_id == call.ids[0]}
    root, queue, batch_span = mine["clocks"], mine["attnserve.queue"], mine["attnserve.batch"]
    # The same instants read from two clocks land together (within 2 ms: the two clocks'
    # offsets to the wall clock are each read once, and the process may be preempted between).
    assert abs(queue.start_ns - root.start_ns) < 2_000_000
    assert abs(batch_span.start_ns - queue.end_ns) < 100_000, "one clock: exact"
    assert abs(root.end_ns - batch_span.end_ns - 1_000_000) < 2_000_000
