"""Every service on the gRPC port against corrupt bodies, the stock ones (health,
reflection) included: INVALID_ARGUMENT, never UNKNOWN, and no ERROR record in the log.
The server holds the car-order model and the tiny BERT of 512 positions alike."""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf.descriptor import FileDescriptor, MethodDescriptor
from google.protobuf.message_factory import GetMessageClass
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2
from hypothesis import given
from hypothesis import strategies as st

from attnserve.service.proto.attnserve.v1 import admin_pb2, attnserve_pb2
from attnserve.service.proto.inference import grpc_service_pb2 as v2pb
from tests.service.encoder_bundles import with_encoder
from tests.support.fuzzing import SETTINGS, ErrorLog
from tests.support.methods import ALLOWED
from tests.support.servers import RunningServer, make_settings
from tests.support.waits import wait_until

FILES: tuple[FileDescriptor, ...] = (
    attnserve_pb2.DESCRIPTOR,
    v2pb.DESCRIPTOR,
    admin_pb2.DESCRIPTOR,
    health_pb2.DESCRIPTOR,
    reflection_pb2.DESCRIPTOR,
)
METHODS: list[MethodDescriptor] = [
    method for file in FILES for service in file.services_by_name.values() for method in service.methods
]
# A length-delimited field 1 whose length runs past the end: no message parses it.
TRUNCATED = b"\x0a\x05ab"
# A varint that never ends; field 1 as a string of invalid UTF-8 (corrupt where it is a string).
CORRUPT = (TRUNCATED, b"\x08" + b"\xff" * 11)
BAD_UTF8 = b"\x0a\x02\xff\xfe"


def _corrupt(method: MethodDescriptor) -> tuple[bytes, ...]:
    first = method.input_type.fields_by_number.get(1)
    return (*CORRUPT, BAD_UTF8) if first is not None and first.type == first.TYPE_STRING else CORRUPT


@pytest.fixture(scope="module")
def hostile(
    model_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[RunningServer, ErrorLog]]:
    errors = ErrorLog()
    logging.getLogger().addHandler(errors)
    served = with_encoder(model_repository, tmp_path_factory)
    try:
        with RunningServer(make_settings(served, admin=True)) as running:
            yield running, errors
    finally:
        logging.getLogger().removeHandler(errors)


def _path(method: MethodDescriptor) -> str:
    return f"/{method.containing_service.full_name}/{method.name}"


def _call(channel: grpc.Channel, method: MethodDescriptor, body: bytes) -> tuple[str, str]:
    """One raw call of any kind with `body` as its (only) request message."""
    path = _path(method)
    try:
        if method.client_streaming and method.server_streaming:
            replies = list(channel.stream_stream(path, None, None)(iter([body]), timeout=10))
            if replies:  # the APIs' streams answer a bad message with an error reply and go on
                reply = str(GetMessageClass(method.output_type).FromString(replies[0]))
                return ("INVALID_ARGUMENT" if "INVALID_ARGUMENT" in reply else "OK"), reply
        elif method.client_streaming:
            channel.stream_unary(path, None, None)(iter([body]), timeout=10)
        elif method.server_streaming:
            stream = channel.unary_stream(path, None, None)(body, timeout=10)
            for _ in stream:  # Watch streams forever once it has answered
                break
            stream.cancel()  # type: ignore[no-untyped-call]
        else:
            channel.unary_unary(path, None, None)(body, timeout=10)
    except grpc.RpcError as exc:
        code = exc.code()
        return ("CANCELLED" if code == grpc.StatusCode.CANCELLED else code.name), exc.details() or ""
    return "OK", ""


@pytest.mark.parametrize("method", METHODS, ids=_path)
def test_a_corrupt_body_is_invalid_argument_on_every_method(
    hostile: tuple[RunningServer, ErrorLog], method: MethodDescriptor
) -> None:
    server, errors = hostile
    with grpc.insecure_channel(server.target) as channel:
        for body in _corrupt(method):
            code, message = _call(channel, method, body)
            assert code == "INVALID_ARGUMENT", (body, code, message)
            assert method.input_type.full_name in message or "request body" in message, message
            assert len(message) < 400
    assert errors.messages == []


@given(body=st.binary(max_size=64))
@SETTINGS
def test_random_bodies_to_health_and_reflection(hostile: tuple[RunningServer, ErrorLog], body: bytes) -> None:
    server, errors = hostile
    with grpc.insecure_channel(server.target) as channel:
        for method in METHODS:
            if method.containing_service.full_name in (
                "grpc.health.v1.Health",
                reflection_pb2.DESCRIPTOR.package + ".ServerReflection",
            ):
                code, message = _call(channel, method, body)
                assert code in ALLOWED | {"CANCELLED"}, (method.name, code, message)
    assert errors.messages == []


def test_health_list_answers_every_service(hostile: tuple[RunningServer, ErrorLog]) -> None:
    server, errors = hostile
    with grpc.insecure_channel(server.target) as channel:
        raw = channel.unary_unary(
            _path(health_pb2.DESCRIPTOR.services_by_name["Health"].methods_by_name["List"]), None, None
        )(b"", timeout=10)
        check = channel.unary_unary("/grpc.health.v1.Health/Check", None, None)
        unknown = health_pb2.HealthCheckRequest(service="nosuch").SerializeToString()
        with pytest.raises(grpc.RpcError) as caught:
            check(unknown, timeout=10)
    statuses = health_pb2.HealthListResponse.FromString(raw).statuses
    assert statuses[""].status == health_pb2.HealthCheckResponse.SERVING
    assert {"car", "pool", "bert", "attnserve.v1.Classifier"} <= set(statuses)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert errors.messages == []


def test_a_reload_cancelled_at_once_leaves_no_unretrieved_error(
    hostile: tuple[RunningServer, ErrorLog],
) -> None:
    server, errors = hostile
    body = admin_pb2.ReloadRequest(models=["ghost"]).SerializeToString()
    with grpc.insecure_channel(server.target) as channel:
        reload = channel.unary_unary("/attnserve.v1.Admin/Reload", None, None)
        codes = []
        settled = server.pending_tasks()
        for i in range(40):  # deadlines from 0.5 to 4 ms: some end as the reply is sent
            try:
                reload(body, timeout=0.0005 * (1 + i % 8))
                codes.append("OK")
            except grpc.RpcError as exc:
                codes.append(exc.code().name)
        with pytest.raises(grpc.RpcError) as caught:  # waits for the reloads before it
            reload(body, timeout=30)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert set(codes) <= {"DEADLINE_EXCEEDED", "NOT_FOUND"}, codes
    # The calls' handlers (cancelled or not) and the shielded reloads have all ended: their
    # tasks are gone from the server's loop, and nothing that ends later can log.
    wait_until(lambda: server.pending_tasks() <= settled, what="the reload calls to end on the server")
    server.run(_collect())  # "Task exception was never retrieved" is logged when the task is freed
    assert errors.messages == []


async def _collect() -> None:
    gc.collect()


@pytest.mark.parametrize("model", ["car", "bert"])
def test_a_huge_shape_gets_a_short_invalid_argument(
    hostile: tuple[RunningServer, ErrorLog], model: str
) -> None:
    server, _ = hostile
    request = v2pb.ModelInferRequest(model_name=model)
    request.inputs.add(name="TEXT", datatype="BYTES", shape=[1] * 100_000)
    with grpc.insecure_channel(server.target) as channel, pytest.raises(grpc.RpcError) as caught:
        channel.unary_unary("/inference.GRPCInferenceService/ModelInfer", None, None)(
            request.SerializeToString(), timeout=10
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
    assert len(caught.value.details() or "") < 400
