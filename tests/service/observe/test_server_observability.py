"""A real server exporting traces to a real OTLP receiver, for gRPC native, gRPC V2 and HTTP
calls; and its drift series after real traffic.

Each call is made inside a caller's span whose `traceparent` travels in gRPC metadata or an
HTTP header: the server's call span must be its child, with one child span per stage, and
the call's `attnserve.inference` span must link to the batch span that links back to it.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace.span import SpanContext

from attnserve.service.client import AsyncClient, Client, ClientError
from attnserve.service.client.messages import build_request
from attnserve.service.proto.inference import grpc_service_pb2 as v2pb
from attnserve.service.settings import Settings
from kit.otlp import OtlpReceiver, ReceivedSpan
from tests.support import http
from tests.support.process import ServerProcess
from tests.support.servers import RunningServer, free_port, make_settings
from tests.support.v2 import text_request

pytestmark = pytest.mark.skipif(
    "tracing" not in Settings.model_fields,
    reason="Settings does not include service.observe.settings.ObserveSettings",
)

MODEL = "pool"
TEXTS = ["the white car is on the left of the black car", "the red car is right of the blue car"]
STAGES = {
    "attnserve.parse",
    "attnserve.tokenize",
    "attnserve.queue",
    "attnserve.inference",
    "attnserve.reply",
}
TRACER = TracerProvider().get_tracer("caller")


@pytest.fixture(scope="module")
def traced(model_repository: Path) -> Iterator[tuple[RunningServer, OtlpReceiver, int]]:
    saved = os.environ.get("OTEL_BSP_SCHEDULE_DELAY")
    os.environ["OTEL_BSP_SCHEDULE_DELAY"] = "50"  # export spans within 50 ms, not the default 5 s
    try:
        with OtlpReceiver() as receiver:
            port = free_port()
            settings = make_settings(
                model_repository,
                tracing=True,
                otlp_endpoint=receiver.grpc_endpoint,
                otlp_protocol="grpc",
                trace_sample_ratio=1.0,
                http_port=port,
                max_delay_ms=50.0,  # concurrent calls share batches
            )
            with RunningServer(settings) as server:
                yield server, receiver, port
    finally:
        if saved is None:
            os.environ.pop("OTEL_BSP_SCHEDULE_DELAY", None)
        else:
            os.environ["OTEL_BSP_SCHEDULE_DELAY"] = saved


def _traceparent(span_context: object) -> str:
    context = span_context  # an SDK SpanContext
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"  # type: ignore[attr-defined]


def _served(receiver: OtlpReceiver, trace_id: str, name: str) -> tuple[ReceivedSpan, dict[str, ReceivedSpan]]:
    """The server span called `name` in `trace_id`, once it and its stage spans arrived."""

    def complete(spans: list[ReceivedSpan]) -> bool:
        mine = [s for s in spans if s.trace_id == trace_id]
        return any(s.name == name for s in mine) and {s.name for s in mine} >= STAGES

    spans = [s for s in receiver.wait_for(complete, timeout_s=20) if s.trace_id == trace_id]
    (call,) = [s for s in spans if s.name == name]
    return call, {s.name: s for s in spans if s.parent_span_id == call.span_id}


def _check_call(
    receiver: OtlpReceiver, caller: SpanContext, name: str, api: tuple[str, str], texts: int = len(TEXTS)
) -> ReceivedSpan:
    trace_id = f"{caller.trace_id:032x}"
    call, children = _served(receiver, trace_id, name)
    assert call.parent_span_id == f"{caller.span_id:016x}"
    assert call.kind == "SPAN_KIND_SERVER"
    assert call.resource["service.name"] == "attnserve"
    attributes = call.attributes
    assert (attributes["attnserve.protocol"], attributes["attnserve.transport"]) == api
    assert attributes["attnserve.model"] == MODEL and attributes["attnserve.model.version"] == 1
    assert attributes["attnserve.texts"] == texts and attributes["attnserve.status"] == "OK"
    assert set(children) >= STAGES, sorted(children)
    for stage in children.values():
        assert call.start_ns <= stage.start_ns <= stage.end_ns <= call.end_ns, stage.name
    batch_ids = {span_id for _, span_id in children["attnserve.inference"].links}
    batches = [s for s in receiver.spans if s.span_id in batch_ids]
    assert batches and all(b.name == "attnserve.batch" for b in batches)
    for batch in batches:
        assert (trace_id, call.span_id) in batch.links, "the batch links back to the call"
        assert batch.attributes["attnserve.batch.size"] >= 1
    return call


def test_native_classify_continues_the_callers_trace(traced: tuple[RunningServer, OtlpReceiver, int]) -> None:
    server, receiver, _ = traced
    with Client(server.target) as client, TRACER.start_as_current_span("caller") as caller:
        client.classify(TEXTS, model=MODEL)
    _check_call(receiver, caller.get_span_context(), "attnserve.v1.Classifier/Classify", ("native", "grpc"))


def test_v2_model_infer_continues_the_callers_trace(traced: tuple[RunningServer, OtlpReceiver, int]) -> None:
    server, receiver, _ = traced
    with TRACER.start_as_current_span("caller") as caller, grpc.insecure_channel(server.target) as channel:
        infer = channel.unary_unary(
            "/inference.GRPCInferenceService/ModelInfer",
            request_serializer=v2pb.ModelInferRequest.SerializeToString,
            response_deserializer=v2pb.ModelInferResponse.FromString,
        )
        infer(
            text_request(MODEL, TEXTS), metadata=(("traceparent", _traceparent(caller.get_span_context())),)
        )
    _check_call(
        receiver, caller.get_span_context(), "inference.GRPCInferenceService/ModelInfer", ("v2", "grpc")
    )


@pytest.mark.parametrize(
    ("path", "name"),
    [
        (f"/v1/models/{MODEL}:classify", "POST /v1/models/{name}:classify"),
        (f"/v2/models/{MODEL}/infer", "POST /v2/models/{name}/infer"),
    ],
)
def test_http_calls_continue_the_callers_trace(
    traced: tuple[RunningServer, OtlpReceiver, int], path: str, name: str
) -> None:
    _, receiver, port = traced
    body = (
        {"texts": TEXTS}
        if path.endswith(":classify")
        else {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [2, 1], "data": TEXTS}]}
    )
    with TRACER.start_as_current_span("caller") as caller:
        reply = http.call(port, "POST", path, body, {"traceparent": _traceparent(caller.get_span_context())})
    assert reply.status == 200, reply.body
    _check_call(
        receiver, caller.get_span_context(), name, ("native" if path.endswith(":classify") else "v2", "http")
    )


def test_each_request_of_a_stream_is_a_call_span_of_the_callers_trace(
    traced: tuple[RunningServer, OtlpReceiver, int],
) -> None:
    server, receiver, _ = traced

    async def stream() -> SpanContext:
        async with AsyncClient(server.target) as client:
            with TRACER.start_as_current_span("caller") as caller:
                requests = [build_request(TEXTS, MODEL, 0, "none", 0, f"r{i}") for i in range(2)]
                replies = [reply async for reply in client.stream(requests)]
            assert len(replies) == 2
            return caller.get_span_context()

    caller = asyncio.run(stream())
    trace_id = f"{caller.trace_id:032x}"
    name = "attnserve.v1.Classifier/ClassifyStream"
    spans = receiver.wait_for(lambda got: sum(s.trace_id == trace_id and s.name == name for s in got) == 2)
    calls = [s for s in spans if s.trace_id == trace_id and s.name == name]
    assert all(c.parent_span_id == f"{caller.span_id:016x}" for c in calls)
    assert all(c.attributes["attnserve.texts"] == len(TEXTS) for c in calls)


def test_concurrent_calls_share_a_batch_span_that_links_them_all(
    traced: tuple[RunningServer, OtlpReceiver, int],
) -> None:
    server, receiver, _ = traced

    def one(_: int) -> SpanContext:
        with Client(server.target) as client, TRACER.start_as_current_span("caller") as caller:
            client.classify(TEXTS[:1], model=MODEL)
        return caller.get_span_context()

    with ThreadPoolExecutor(8) as pool:
        callers = list(pool.map(one, range(8)))
    calls = [
        _check_call(receiver, c, "attnserve.v1.Classifier/Classify", ("native", "grpc"), texts=1)
        for c in callers
    ]
    shared = [s for s in receiver.spans if s.name == "attnserve.batch" and len(s.links) >= 2]
    assert shared, "calls 50 ms apart at most were batched together"
    linked = {span_id for batch in shared for _, span_id in batch.links}
    assert linked & {c.span_id for c in calls}


def test_an_attribution_is_a_stage_of_its_call_linked_to_the_batches_of_its_rows(
    traced: tuple[RunningServer, OtlpReceiver, int],
) -> None:
    _, receiver, port = traced
    with TRACER.start_as_current_span("caller") as caller:
        body = {"texts": TEXTS, "attribution": "occlusion"}
        reply = http.call(port, "POST", f"/v1/models/{MODEL}:classify", body,
                          {"traceparent": _traceparent(caller.get_span_context())})  # fmt: skip
    assert reply.status == 200, reply.body
    rows = sum(result["attribution_rows"] for result in reply.json()["results"])
    call = _check_call(
        receiver, caller.get_span_context(), "POST /v1/models/{name}:classify", ("native", "http")
    )
    (attribution,) = [
        s for s in receiver.spans if s.name == "attnserve.attribution" and s.parent_span_id == call.span_id
    ]
    assert attribution.attributes == {"attnserve.attribution.rows": rows}
    (inference,) = [
        s for s in receiver.spans if s.name == "attnserve.inference" and s.parent_span_id == call.span_id
    ]
    assert (
        inference.end_ns <= attribution.start_ns <= attribution.end_ns <= call.end_ns
    )  # after the texts' batches
    batch_ids = {span_id for _, span_id in attribution.links}
    batches = [s for s in receiver.spans if s.span_id in batch_ids]
    assert batches and sum(b.attributes["attnserve.batch.size"] for b in batches) == rows


def test_a_refused_call_is_an_error_span(traced: tuple[RunningServer, OtlpReceiver, int]) -> None:
    server, receiver, _ = traced
    with (
        Client(server.target) as client,
        TRACER.start_as_current_span("caller") as caller,
        pytest.raises(ClientError),
    ):
        client.classify(TEXTS, model="no-such-model")
    trace_id = f"{caller.get_span_context().trace_id:032x}"
    spans = receiver.wait_for(
        lambda got: any(s.trace_id == trace_id and s.kind == "SPAN_KIND_SERVER" for s in got)
    )
    (call,) = [s for s in spans if s.trace_id == trace_id and s.kind == "SPAN_KIND_SERVER"]
    assert call.attributes["attnserve.status"] == "NOT_FOUND" and call.status == "STATUS_CODE_ERROR"


def test_drift_series_count_the_served_texts(traced: tuple[RunningServer, OtlpReceiver, int]) -> None:
    server, _, _ = traced
    before = server.value("attnserve_predictions_total", model=MODEL)
    with Client(server.target) as client:
        client.classify(TEXTS, model=MODEL)
    assert server.value("attnserve_predictions_total", model=MODEL) == before + len(TEXTS)
    assert server.value("attnserve_text_tokens_count", model=MODEL) >= len(TEXTS)
    shares = server.samples("attnserve_training_label_share", model=MODEL, version="1")
    assert shares and sum(shares) == pytest.approx(1.0, abs=1e-4), "the bundle's profile is exported"


def test_json_log_lines_name_the_call_and_end_with_its_access_line(model_repository: Path) -> None:
    with OtlpReceiver() as receiver:
        args = ("--log-format", "json", "--access-log-sample", "1", "--tracing")
        env = {"ATTNSERVE_OTLP_ENDPOINT": receiver.grpc_endpoint}
        with ServerProcess(model_repository, *args, env=env) as server:
            with Client(server.target) as client, TRACER.start_as_current_span("caller") as caller:
                client.classify(TEXTS, model=MODEL, request_id="order-42")
            server.terminate()
            assert server.wait(30) == 0
            output = server.output
    lines = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    assert len(lines) == len([line for line in output.splitlines() if line.strip()]), output
    assert any(line["logger"] == "attnserve.service.server" for line in lines)
    (access,) = [line for line in lines if line["logger"] == "attnserve.access" and line["model"] == MODEL]
    assert access["request_id"] == "order-42"
    assert access["trace_id"] == f"{caller.get_span_context().trace_id:032x}"
    assert {k: access[k] for k in ("transport", "method", "version", "texts", "status")} == {
        "transport": "grpc",
        "method": "Classify",
        "version": "1",
        "texts": 2,
        "status": "OK",
    }
    assert access["latency_ms"] > 0 and access["queue_ms"] >= 0


def test_queue_inference_and_batch_spans_share_the_batchers_times(
    traced: tuple[RunningServer, OtlpReceiver, int],
) -> None:
    server, receiver, _ = traced
    with Client(server.target) as client, TRACER.start_as_current_span("caller") as caller:
        client.classify(TEXTS[:1], model=MODEL)
    trace_id = f"{caller.get_span_context().trace_id:032x}"
    _, stages = _served(receiver, trace_id, "attnserve.v1.Classifier/Classify")
    queue, inference = stages["attnserve.queue"], stages["attnserve.inference"]
    ((_, batch_id),) = inference.links  # one text: one batch
    (batch,) = [s for s in receiver.spans if s.span_id == batch_id]
    # Read from the same clock readings, converted to wall time separately (a few µs apart).
    slack_ns = 100_000
    assert abs(queue.end_ns - inference.start_ns) <= slack_ns
    assert inference.start_ns - slack_ns <= batch.start_ns <= batch.end_ns <= inference.end_ns + slack_ns
    assert queue.start_ns >= stages["attnserve.tokenize"].end_ns - slack_ns
