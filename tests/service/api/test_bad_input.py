"""Bad and odd input on every API, over real channels: each case gets the same status from
attnserve.v1, the V2 protocol and the HTTP port (JSON API and V2 REST), only ever one of the
allowed codes, and the server keeps serving. Wire-level cases send raw bytes on a generic
channel (no serializer)."""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest

from attnserve.service.api.http.errors import HTTP_STATUS
from attnserve.service.client import Client, ClientError
from attnserve.service.errors import Status
from attnserve.service.proto.attnserve.v1 import attnserve_pb2 as pb
from attnserve.service.proto.inference import grpc_service_pb2 as v2pb
from tests.support.http import call, classify
from tests.support.load import record_figures
from tests.support.methods import ALLOWED, CLASSIFY, MODEL_INFER
from tests.support.servers import RunningServer, free_port, make_settings
from tests.support.v2 import V2Calls, output, text_request

MEGABYTE_TEXT = ("the white car is on the left of the black car " * 23_000)[:1_000_000]

# text -> (status, what the reply must show); the same for both APIs.
TEXTS: dict[str, tuple[str, str, str]] = {
    "empty": ("", "INVALID_ARGUMENT", "texts[0] has no tokens"),
    "whitespace only": (" \t\n \u3000 ", "INVALID_ARGUMENT", "texts[0] has no tokens"),
    "zero-width and BOM only": ("\u200b\ufeff", "INVALID_ARGUMENT", "texts[0] has no tokens"),
    "NUL and control only": ("\x00\x00\x07\x1b", "INVALID_ARGUMENT", "texts[0] has no tokens"),
    "emoji only": ("🚗🚕", "INVALID_ARGUMENT", "texts[0] has no tokens"),
    "only unknown words": ("zzqx qwv blorf", "OK", "[UNK] [UNK] [UNK]"),
    "emoji among words": ("the white car 🚗 is left", "OK", "the white car is left"),
    "right-to-left script": ("السيارة البيضاء", "OK", "[UNK] [UNK]"),
    "RTL override": ("\u202ethe car", "OK", "the car"),
    "combining accent": ("cafe\u0301 car", "OK", "[UNK] car"),
    "NUL and escapes inside": ("a white\x00car\x07\x1b[31m", "OK", "a white car [UNK]"),
    "1 MB text": (MEGABYTE_TEXT, "INVALID_ARGUMENT", "texts[0] has 1000000 characters; the limit is 10000"),
}


@pytest.fixture(scope="module")
def server(model_repository: Path) -> Iterator[RunningServer]:
    with RunningServer(make_settings(model_repository, http_port=free_port())) as running:
        yield running


@pytest.fixture(scope="module")
def v2(server: RunningServer) -> Iterator[V2Calls]:
    calls = V2Calls(server.target)
    yield calls
    calls.close()
    record_figures("odd texts on both APIs: case -> status (native = V2)", **OUTCOMES)


OUTCOMES: dict[str, str] = {}


def _native(client: Client, text: str) -> tuple[str, str]:
    try:
        result = client.classify([text], model="car").results[0]
    except ClientError as exc:
        return exc.code.name, exc.details
    return "OK", " ".join(result.tokens)


def _v2(v2: V2Calls, text: str) -> tuple[str, str]:
    try:
        reply = v2.infer(text_request("car", [text], outputs=["LABEL", "LENGTHS"]))
    except grpc.RpcError as exc:
        return exc.code().name, exc.details() or ""
    return "OK", str(int(output(reply, "LENGTHS")[0]))


def _http_json(port: int, text: str) -> tuple[str, str]:
    reply = classify(port, "car", {"texts": [text]})
    if reply.status != 200:
        assert HTTP_STATUS[Status[reply.error["code"]]] == reply.status
        return reply.error["code"], reply.error["message"]
    return "OK", " ".join(reply.json()["results"][0]["tokens"])


def _http_v2(port: int, text: str) -> tuple[int, str]:
    document = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1, 1], "data": [text]}]}
    reply = call(port, "POST", "/v2/models/car/infer", document)
    body = reply.json()
    return reply.status, body["error"] if reply.status != 200 else body["outputs"][0]["datatype"]


@pytest.mark.parametrize("case", list(TEXTS))
def test_odd_text_gets_the_same_allowed_status_from_every_api(
    client: Client, v2: V2Calls, server: RunningServer, case: str
) -> None:
    text, code, shown = TEXTS[case]
    port = server.server.http_port  # type: ignore[union-attr]
    native_code, native_shown = _native(client, text)
    v2_code, v2_shown = _v2(v2, text)
    http_code, http_shown = _http_json(port, text)
    rest_status, rest_shown = _http_v2(port, text)
    assert native_code in ALLOWED
    assert native_code == v2_code == http_code == code, (native_shown, v2_shown, http_shown)
    assert rest_status == (200 if code == "OK" else HTTP_STATUS[Status[code]]), rest_shown
    assert shown in http_shown
    OUTCOMES[case] = code
    assert shown in native_shown
    if code == "OK":
        assert v2_shown == str(len(shown.split()))  # V2 saw as many tokens as the native API
    else:
        assert v2_shown.startswith("input TEXT: ") and shown in v2_shown
    assert client.classify("a white car", model="car").results[0].label  # still serving


def test_a_megabyte_text_under_a_raised_limit_is_truncated_and_flagged(model_repository: Path) -> None:
    settings = make_settings(model_repository, max_text_chars=2_000_000, max_message_bytes=8 << 20)
    with RunningServer(settings) as server, Client(server.target) as client:
        result = client.classify([MEGABYTE_TEXT, "a white car"], model="car").results
        max_len = client.model("car").max_len
        assert result[0].truncated and len(result[0].tokens) == max_len
        assert not result[1].truncated
        v2 = V2Calls(server.target)
        try:
            lengths = output(v2.infer(text_request("car", [MEGABYTE_TEXT], outputs=["LENGTHS"])), "LENGTHS")
        finally:
            v2.close()
        assert lengths.tolist() == [max_len]


def test_long_text_is_rejected_on_both_apis_when_configured(model_repository: Path) -> None:
    with RunningServer(make_settings(model_repository, long_text="reject")) as server:
        text = " ".join(["the white car"] * 40)
        with Client(server.target) as client:
            code, message = _native(client, text)
        assert code == "INVALID_ARGUMENT" and "max_len of 48 tokens" in message
        v2 = V2Calls(server.target)
        try:
            code, message = _v2(v2, text)
        finally:
            v2.close()
        assert code == "INVALID_ARGUMENT" and message.startswith("input TEXT: texts[0]")


def _raw_call(target: str, method: str, body: bytes, compression: grpc.Compression) -> grpc.RpcError:
    with grpc.insecure_channel(target) as channel:
        # no serializer: the bytes go out as they are
        call = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as caught:
            call(body, timeout=20, compression=compression)
    return caught.value


def _v2_body(text_bytes: int) -> bytes:
    request = text_request("car", ["x"])
    request.raw_input_contents[0] = np.uint32(text_bytes).tobytes() + b"\0" * text_bytes
    data: bytes = request.SerializeToString()
    return data


BODIES: dict[str, tuple[str, Callable[[int], bytes]]] = {
    "native": (
        CLASSIFY,
        lambda size: pb.ClassifyRequest(model="car", texts=["\0" * size]).SerializeToString(),
    ),
    "v2": (MODEL_INFER, _v2_body),
}


@pytest.mark.parametrize("api", list(BODIES))
@pytest.mark.parametrize("compression", [grpc.Compression.NoCompression, grpc.Compression.Gzip])
def test_message_over_the_limit_is_refused_compressed_or_not(
    server: RunningServer, client: Client, api: str, compression: grpc.Compression
) -> None:
    method, build = BODIES[api]
    body = build(12 << 20)  # 12 MiB; the limit is 4 MiB; gzip sends ~12 KiB that inflate
    if compression == grpc.Compression.Gzip:
        assert len(gzip.compress(body)) < 64 << 10
    error = _raw_call(server.target, method, body, compression)
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "larger than max" in (error.details() or "")
    assert client.classify("a white car", model="car").results[0].label  # still serving


def test_invalid_utf8_in_a_v2_string_field_is_invalid_argument(server: RunningServer) -> None:
    body = b"\x0a\x04ca\xc3\x28"  # model_name = 4 bytes that are not UTF-8
    error = _raw_call(server.target, MODEL_INFER, body, grpc.Compression.NoCompression)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid inference.ModelInferRequest" in (error.details() or "")
    assert v2pb.ModelInferRequest.DESCRIPTOR.fields_by_name["model_name"].number == 1
