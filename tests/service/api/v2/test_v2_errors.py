"""Bad V2 requests get INVALID_ARGUMENT / NOT_FOUND naming the tensor, never UNKNOWN."""

from __future__ import annotations

import struct
from collections.abc import Callable

import grpc
import numpy as np
import pytest
from google.protobuf.message import Message

from attnserve.service.api.v2.tensors import encode_bytes
from attnserve.service.proto.inference import grpc_service_pb2 as pb
from tests.support.servers import RunningServer
from tests.support.v2 import V2Calls, ids_request, text_request

INVALID, NOT_FOUND = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND
TEXT = "the white car is on the left of the black car"


def _text_as(datatype: str, shape: list[int], raw: bytes) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="car")
    request.inputs.add(name="TEXT", datatype=datatype, shape=shape)
    request.raw_input_contents.append(raw)
    return request


def _ids(ids: list[list[int]], mask: list[list[int]]) -> pb.ModelInferRequest:
    return ids_request("car", np.asarray(ids, dtype=np.int64), np.asarray(mask, dtype=np.int64))


def _short_ids_raw() -> pb.ModelInferRequest:
    request = _ids([[2, 3]], [[1, 1]])
    request.raw_input_contents[0] = request.raw_input_contents[0][:-3]
    return request


def _ids_without_mask() -> pb.ModelInferRequest:
    request = _ids([[2, 3]], [[1, 1]])
    del request.inputs[1]
    del request.raw_input_contents[1]
    return request


def _raw_and_typed() -> pb.ModelInferRequest:
    request = text_request("car", [TEXT])
    request.inputs[0].contents.bytes_contents.append(TEXT.encode())
    return request


def _missing_raw_entry() -> pb.ModelInferRequest:
    request = _ids([[2, 3]], [[1, 1]])
    del request.raw_input_contents[1]
    return request


CASES: dict[str, tuple[Callable[[], pb.ModelInferRequest | bytes], grpc.StatusCode, str]] = {
    "unknown model": (lambda: text_request("no-such-model", [TEXT]), NOT_FOUND, "no-such-model"),
    "unknown version": (lambda: text_request("car", [TEXT], version="7"), NOT_FOUND, "version"),
    "version not a number": (lambda: text_request("car", [TEXT], version="latest"), INVALID, "model_version"),
    "wrong dtype": (
        lambda: _text_as("INT64", [1, 1], encode_bytes([b"x"])),
        INVALID,
        "input TEXT: datatype INT64",
    ),
    "wrong rank": (
        lambda: _text_as("BYTES", [1], encode_bytes([TEXT.encode()])),
        INVALID,
        "input TEXT: shape [1]",
    ),
    "wrong inner dim": (
        lambda: _text_as("BYTES", [1, 2], encode_bytes([b"a", b"b"])),
        INVALID,
        "input TEXT: shape",
    ),
    "element count": (
        lambda: _text_as("BYTES", [2, 1], encode_bytes([b"only one"])),
        INVALID,
        "input TEXT: holds 1",
    ),
    "truncated length prefix": (lambda: _text_as("BYTES", [1, 1], b"\x05\x00"), INVALID, "input TEXT"),
    "length past the end": (
        lambda: _text_as("BYTES", [1, 1], struct.pack("<I", 99) + b"abc"),
        INVALID,
        "input TEXT: raw BYTES element 0 declares 99 bytes",
    ),
    "invalid utf-8": (
        lambda: _text_as("BYTES", [1, 1], encode_bytes([b"caf\xc3("])),
        INVALID,
        "input TEXT: element 0",
    ),
    "empty text": (lambda: text_request("car", [""]), INVALID, "input TEXT"),
    "byte size mismatch": (_short_ids_raw, INVALID, "input INPUT_IDS: raw data has 13 bytes"),
    "missing mask": (_ids_without_mask, INVALID, "input ATTENTION_MASK: missing"),
    "no inputs": (lambda: pb.ModelInferRequest(model_name="car"), INVALID, "input INPUT_IDS: missing"),
    "both input forms": (
        lambda: pb.ModelInferRequest(
            model_name="car",
            inputs=[*text_request("car", [TEXT]).inputs, *_ids([[2]], [[1]]).inputs],
            raw_input_contents=[
                *text_request("car", [TEXT]).raw_input_contents,
                *_ids([[2]], [[1]]).raw_input_contents,
            ],
        ),
        INVALID,
        "not both",
    ),
    "unknown input": (
        lambda: pb.ModelInferRequest(
            model_name="car",
            inputs=[pb.ModelInferRequest.InferInputTensor(name="IMAGE", datatype="FP32", shape=[1])],
        ),
        INVALID,
        "input IMAGE",
    ),
    "mask shape differs": (
        lambda: ids_request("car", np.ones((1, 3), np.int64), np.ones((1, 2), np.int64)),
        INVALID,
        "input ATTENTION_MASK: shape [1, 2] differs",
    ),
    "mask with holes": (lambda: _ids([[2, 3, 4]], [[1, 0, 1]]), INVALID, "input ATTENTION_MASK"),
    "empty mask row": (lambda: _ids([[2, 3]], [[0, 0]]), INVALID, "input INPUT_IDS"),
    "id outside the vocabulary": (lambda: _ids([[2, 10**9]], [[1, 1]]), INVALID, "input INPUT_IDS"),
    "raw entries per input": (_missing_raw_entry, INVALID, "raw_input_contents has 1 entries for 2 inputs"),
    "raw and typed together": (_raw_and_typed, INVALID, "input TEXT: has typed contents"),
    "unknown output": (lambda: text_request("car", [TEXT], outputs=["NOPE"]), INVALID, "output NOPE"),
    "output twice": (
        lambda: text_request("car", [TEXT], outputs=["LABEL", "LABEL"]),
        INVALID,
        "output LABEL",
    ),
    "attention of a model without it": (
        lambda: text_request("bow", [TEXT], outputs=["ATTENTION"]),
        INVALID,
        "output ATTENTION",
    ),
    "too many texts": (lambda: text_request("car", [TEXT] * 65), INVALID, "input TEXT: texts: 65 texts"),
    "corrupt protobuf body": (
        lambda: b"\x0a\xff\xff\xff",
        INVALID,
        "not a valid inference.ModelInferRequest",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_request_is_answered_with_a_clear_status(v2: V2Calls, case: str) -> None:
    build, code, fragment = CASES[case]
    with pytest.raises(grpc.RpcError) as caught:
        v2.infer(build())
    error = caught.value
    assert error.code() == code, error.details()
    details = error.details()
    assert details is not None
    assert fragment in details


def test_unimplemented_rpcs_answer_unimplemented(v2: V2Calls) -> None:
    # RepositoryModelLoad (field 1 repository_name, field 2 model_name) is not declared here.
    with pytest.raises(grpc.RpcError) as caught:
        v2.unary("RepositoryModelLoad", b"\x12\x03car", pb.ServerLiveResponse)
    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED


@pytest.mark.parametrize(
    ("method", "request_message", "reply_type", "fragment"),
    [
        ("ModelMetadata", pb.ModelMetadataRequest(name="ghost"), pb.ModelMetadataResponse, "ghost"),
        ("ModelConfig", pb.ModelConfigRequest(name="car", version="9"), pb.ModelConfigResponse, "version 9"),
        ("ModelStatistics", pb.ModelStatisticsRequest(name="ghost"), pb.ModelStatisticsResponse, "ghost"),
        (
            "RepositoryIndex",
            pb.RepositoryIndexRequest(repository_name="x"),
            pb.RepositoryIndexResponse,
            "one",
        ),
    ],
)
def test_unknown_models_are_not_found(
    v2: V2Calls, method: str, request_message: Message, reply_type: type[Message], fragment: str
) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        v2.unary(method, request_message, reply_type)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    details = caught.value.details()
    assert details is not None
    assert fragment in details


def test_stream_errors_come_in_band_and_the_stream_goes_on(v2: V2Calls) -> None:
    replies = v2.stream(
        [
            text_request("car", [TEXT], request_id="good-1"),
            text_request("car", [TEXT], request_id="bad-1", outputs=["NOPE"]),
            text_request("ghost", [TEXT], request_id="bad-2"),
            text_request("car", [TEXT], request_id="good-2"),
        ]
    )
    assert [reply.infer_response.id for reply in replies] == ["good-1", "bad-1", "bad-2", "good-2"]
    assert [bool(reply.error_message) for reply in replies] == [False, True, True, False]
    assert replies[1].error_message.startswith("INVALID_ARGUMENT: output NOPE")
    assert replies[2].error_message.startswith("NOT_FOUND")
    assert [len(reply.infer_response.outputs) for reply in replies] == [5, 0, 0, 5]


def test_errors_are_counted_for_the_v2_api(server: RunningServer, v2: V2Calls) -> None:
    def count(model: str, code: str) -> float:
        return server.value(
            "attnserve_requests_total", protocol="v2", transport="grpc", model=model, code=code
        )

    before_bad, before_unknown = count("car", "INVALID_ARGUMENT"), count("_unknown", "NOT_FOUND")
    build: Callable[[], pb.ModelInferRequest]
    for build in (
        lambda: text_request("car", [TEXT], outputs=["NOPE"]),
        lambda: text_request("ghost", [TEXT]),
    ):
        with pytest.raises(grpc.RpcError):
            v2.infer(build())
    assert count("car", "INVALID_ARGUMENT") == before_bad + 1
    assert count("_unknown", "NOT_FOUND") == before_unknown + 1
