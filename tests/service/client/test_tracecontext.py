"""The clients send the caller's trace context: checked on the metadata a real gRPC server receives."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2
from opentelemetry.sdk.trace import TracerProvider

from attnserve.service.client import AsyncClient, Client
from attnserve.service.client.channels import Security
from attnserve.service.client.tracecontext import trace_headers
from attnserve.service.proto.attnserve.v1 import attnserve_pb2 as pb

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = f"00-{TRACE}-00f067aa0ba902b7-01"
TOKEN = "a-token-of-sixteen-chars"


class Recorder:
    """A gRPC server answering ListModels and health Check, keeping each call's metadata."""

    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        handlers = {
            "ListModels": grpc.unary_unary_rpc_method_handler(
                self._reply(pb.ListModelsResponse()),
                request_deserializer=pb.ListModelsRequest.FromString,
                response_serializer=pb.ListModelsResponse.SerializeToString,
            )
        }
        health = {
            "Check": grpc.unary_unary_rpc_method_handler(
                self._reply(health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)),
                request_deserializer=health_pb2.HealthCheckRequest.FromString,
                response_serializer=health_pb2.HealthCheckResponse.SerializeToString,
            )
        }
        self.server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler("attnserve.v1.Classifier", handlers),
                grpc.method_handlers_generic_handler("grpc.health.v1.Health", health),
            )
        )
        self.port = self.server.add_insecure_port("127.0.0.1:0")

    def _reply(self, message: Any) -> Any:
        def handle(request: Any, context: grpc.ServicerContext) -> Any:
            self.seen.append({str(k): str(v) for k, v in context.invocation_metadata()})
            return message

        return handle

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"


@pytest.fixture(scope="module")
def recorder() -> Iterator[Recorder]:
    running = Recorder()
    running.server.start()
    yield running
    running.server.stop(None)


def test_a_call_inside_an_active_span_carries_its_traceparent(recorder: Recorder) -> None:
    tracer = TracerProvider().get_tracer("app")
    with Client(recorder.target, security=Security(token=TOKEN)) as client:
        client.models()
        with tracer.start_as_current_span("app work") as span:
            client.models()
            client.health()
            headers = trace_headers()
        context = span.get_span_context()
    outside, inside, health = recorder.seen[-3:]
    assert "traceparent" not in outside, "without an active span nothing is added"
    expected = f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
    assert inside["traceparent"] == health["traceparent"] == expected
    assert inside["authorization"] == f"Bearer {TOKEN}", "the token still travels"
    assert headers == {"traceparent": expected}
    assert trace_headers() == {}


def test_the_asyncio_client_propagates_too(recorder: Recorder) -> None:
    tracer = TracerProvider().get_tracer("app")

    async def call() -> str:
        async with AsyncClient(recorder.target) as client:
            with tracer.start_as_current_span("async work") as span:
                await client.models()
            return f"{span.get_span_context().trace_id:032x}"

    trace_id = asyncio.run(call())
    assert recorder.seen[-1]["traceparent"].split("-")[1] == trace_id


def test_the_command_continues_a_trace_from_traceparent_in_its_environment(recorder: Recorder) -> None:
    env = {**os.environ, "TRACEPARENT": PARENT, "TRACESTATE": "vendor=1"}
    command = [str(Path(sys.executable).with_name("attnserve-client")), "--target", recorder.target, "health"]
    before = len(recorder.seen)
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert len(recorder.seen) == before + 1
    assert recorder.seen[-1]["traceparent"] == PARENT
    assert recorder.seen[-1]["tracestate"] == "vendor=1"
    env.pop("TRACEPARENT")
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "traceparent" not in recorder.seen[-1]
