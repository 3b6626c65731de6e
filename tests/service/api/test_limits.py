"""Limits that keep hostile or careless calls cheap: replies larger than a client accepts
are refused before any work, metadata methods take small bodies only, and a stream whose
client stops reading and then cancels ends without a traceback in the log."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import grpc
import pytest

from attnserve.service.proto.attnserve.v1 import attnserve_pb2 as pb
from attnserve.service.proto.inference import grpc_service_pb2 as v2pb
from tests.support.fuzzing import ErrorLog, call
from tests.support.methods import CLASSIFY, MODEL_INFER
from tests.support.servers import RunningServer, make_settings
from tests.support.v2 import text_request
from tests.support.waits import wait_until

LONG = " ".join(["the white car is left of the black car"] * 10)  # truncated to max_len tokens
ALL, POOLED = pb.ATTENTION_MODE_ALL, pb.ATTENTION_MODE_POOLED


@pytest.fixture
def errors() -> Iterator[ErrorLog]:
    handler = ErrorLog()
    logging.getLogger().addHandler(handler)
    yield handler
    logging.getLogger().removeHandler(handler)


def _classify(texts: int, attention: pb.AttentionMode) -> bytes:
    request = pb.ClassifyRequest(model="car", texts=[LONG] * texts, attention=attention)
    body: bytes = request.SerializeToString()
    return body


def test_a_reply_over_the_clients_default_limit_is_refused_up_front(model_repository: Path) -> None:
    # 128 long texts with every layer's attention: about 4.7 MB, over the 4 MiB a client takes.
    with RunningServer(make_settings(model_repository, max_texts_per_request=128)) as server:
        code, message = call(server.target, CLASSIFY, _classify(128, ALL))
        assert code == "RESOURCE_EXHAUSTED", message
        assert "max_reply_bytes" in message and "fewer" in message and "POOLED" in message, message
        assert call(server.target, CLASSIFY, _classify(128, POOLED)) == (
            "OK",
            "",
        )  # what the message suggests
        assert server.value("attnserve_requests_total", code="RESOURCE_EXHAUSTED") == 1


def test_max_reply_bytes_caps_both_apis(model_repository: Path) -> None:
    with RunningServer(make_settings(model_repository, max_reply_bytes=512 * 1024)) as server:
        code, message = call(server.target, CLASSIFY, _classify(64, ALL))  # about 2.4 MB
        assert code == "RESOURCE_EXHAUSTED" and "524288" in message, message
        with_attention = text_request("car", [LONG] * 64, outputs=["ATTENTION"])  # about 0.6 MB
        code, message = call(server.target, MODEL_INFER, with_attention.SerializeToString())
        assert code == "RESOURCE_EXHAUSTED" and "max_reply_bytes" in message, message
        without = text_request("car", [LONG] * 64, outputs=["LABEL"])
        assert call(server.target, MODEL_INFER, without.SerializeToString())[0] == "OK"


def test_metadata_methods_take_small_bodies_only(model_repository: Path) -> None:
    with RunningServer(make_settings(model_repository)) as server:
        big = "x" * 100_000
        cases = {
            "/attnserve.v1.Classifier/GetModel": pb.GetModelRequest(model=big),
            "/inference.GRPCInferenceService/ModelMetadata": v2pb.ModelMetadataRequest(name=big),
            "/inference.GRPCInferenceService/ServerLive": v2pb.ServerLiveRequest(),
        }
        for method, request in cases.items():
            body = request.SerializeToString() or b"\x0a\xa0\x8d\x06" + b"x" * 100_000  # an unknown field
            code, message = call(server.target, method, body)
            assert code == "RESOURCE_EXHAUSTED", (method, code, message)
            assert "max_metadata_message_bytes" in message and "65536" in message, message
        assert call(server.target, "/attnserve.v1.Classifier/ListModels", b"")[0] == "OK"


def _answered(server: RunningServer) -> float:
    return server.value("attnserve_requests_total", protocol="native", transport="grpc", code="OK")


def _answered_at_least(server: RunningServer, count: float) -> bool:
    return _answered(server) >= count


def test_cancelling_a_stream_whose_client_stopped_reading_logs_no_traceback(
    model_repository: Path, errors: ErrorLog
) -> None:
    with RunningServer(make_settings(model_repository)) as server:
        assert call(server.target, CLASSIFY, _classify(1, POOLED))[0] == "OK"  # what a first call starts
        settled = server.pending_tasks()
        with grpc.insecure_channel(server.target) as channel:
            stream = channel.stream_stream(
                "/attnserve.v1.Classifier/ClassifyStream", request_serializer=None, response_deserializer=None
            )
            for _ in range(3):
                expected = _answered(server) + 2
                requests = iter([_classify(64, ALL)] * 40)  # 2.4 MB replies: writes block at once
                replies = stream(requests, timeout=30)
                # Never read: once the server has answered requests of the stream, its writes
                # wait on flow control.
                wait_until(partial(_answered_at_least, server, expected), 30, what="replies to write")
                replies.cancel()  # type: ignore[no-untyped-call]  # grpc-stubs leave cancel() untyped
            # Every stream's handler has ended (a failed write is logged before that).
            wait_until(lambda: server.pending_tasks() <= settled, 30, what="the cancelled streams to end")
            code, _ = call(server.target, CLASSIFY, _classify(1, POOLED), channel=channel)
        assert code == "OK"
        assert (
            server.value("attnserve_requests_total", protocol="native", transport="grpc", code="INTERNAL")
            == 0
        )
    assert not errors.messages, errors.messages
