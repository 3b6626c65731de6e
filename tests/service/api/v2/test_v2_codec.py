"""The V2 tensor encoding on its own: BYTES framing, raw/typed data, shape checks, and the
gRPC adapter's layout checks and reply building."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from attnserve.service.api.grpc import v2 as v2_grpc
from attnserve.service.api.v2.reply import bytes_output, numeric_output
from attnserve.service.api.v2.request import inputs_by_name
from attnserve.service.api.v2.tensors import (
    decode_bytes,
    decode_int64,
    encode_bytes,
    format_shape,
    require,
)
from attnserve.service.api.v2.types import InferResponse, InputTensor
from attnserve.service.errors import InvalidArgument
from attnserve.service.proto.inference import grpc_service_pb2 as pb


def _tensor(shape: tuple[int, ...], raw: bytes | None = None, datatype: str = "BYTES") -> InputTensor:
    return InputTensor(name="TEXT", datatype=datatype, shape=shape, raw=raw)


@given(st.lists(st.text(max_size=40), min_size=1, max_size=8))
def test_bytes_round_trip(texts: list[str]) -> None:
    raw = encode_bytes([text.encode() for text in texts])
    assert decode_bytes(_tensor((len(texts), 1), raw)) == texts
    typed = InputTensor("TEXT", "BYTES", (len(texts), 1), values=[text.encode() for text in texts])
    assert decode_bytes(typed) == texts


@given(st.binary(max_size=64))
def test_arbitrary_bytes_decode_or_fail_cleanly(raw: bytes) -> None:
    try:
        decoded = decode_bytes(_tensor((1, 1), raw))
    except InvalidArgument as exc:
        assert exc.message.startswith("input TEXT:")
    else:
        assert encode_bytes([decoded[0].encode()]) == raw


def test_require_checks_datatype_and_every_dimension() -> None:
    require(_tensor((3, 1)), "BYTES", (-1, 1))
    for shape, datatype in (((3,), "BYTES"), ((3, 2), "BYTES"), ((0, 1), "BYTES"), ((3, 1), "INT64")):
        with pytest.raises(InvalidArgument, match="input TEXT"):
            require(_tensor(shape, datatype=datatype), "BYTES", (-1, 1))


def test_a_long_shape_makes_a_short_message() -> None:
    shape = tuple(range(1, 100_001))
    with pytest.raises(InvalidArgument) as caught:
        require(_tensor(shape), "BYTES", (-1, 1))
    assert len(caught.value.message) < 200 and "(100000 dimensions)" in caught.value.message
    assert format_shape((2, 3)) == "[2, 3]"


def test_int64_from_raw_and_typed_values() -> None:
    values = np.arange(6, dtype=np.int64).reshape(2, 3)
    raw = InputTensor("INPUT_IDS", "INT64", (2, 3), raw=values.astype("<i8").tobytes())
    typed = InputTensor("INPUT_IDS", "INT64", (2, 3), values=values.ravel().tolist())
    np.testing.assert_array_equal(decode_int64(raw), values)
    np.testing.assert_array_equal(decode_int64(typed), values)
    short = InputTensor("INPUT_IDS", "INT64", (2, 3), raw=b"\0" * 47)
    with pytest.raises(InvalidArgument, match="raw data has 47 bytes, INT64 shape \\[2, 3\\] needs 48"):
        decode_int64(short)


def test_duplicate_and_unknown_inputs_are_refused() -> None:
    text = _tensor((1, 1), encode_bytes([b"a"]))
    with pytest.raises(InvalidArgument, match="input TEXT: given more than once"):
        inputs_by_name([text, text])
    with pytest.raises(InvalidArgument, match="input NOPE: not an input"):
        inputs_by_name([InputTensor("NOPE", "BYTES", (1, 1), raw=b"")])


def test_grpc_layout_checks_and_typed_contents() -> None:
    request = pb.ModelInferRequest(model_name="m", id="r1")
    tensor = request.inputs.add(name="TEXT", datatype="BYTES", shape=[1, 1])
    tensor.contents.bytes_contents.append(b"left")
    plain = v2_grpc.infer_request(request)
    assert plain.model_name == "m" and plain.id == "r1" and plain.inputs[0].raw is None
    assert decode_bytes(plain.inputs[0]) == ["left"]
    request.raw_input_contents.append(encode_bytes([b"left"]))
    with pytest.raises(InvalidArgument, match="has typed contents although the request uses raw"):
        v2_grpc.infer_request(request)
    request.raw_input_contents.append(b"")
    with pytest.raises(InvalidArgument, match="raw_input_contents has 2 entries for 1 inputs"):
        v2_grpc.infer_request(request)


def test_reply_keeps_metadata_and_raw_data_in_step() -> None:
    outputs = [
        numeric_output("LOGITS", "FP32", np.array([[1.0, -2.0]], dtype=np.float64)),
        bytes_output("LABEL", (1, 1), [b"left"]),
    ]
    response = pb.ModelInferResponse.FromString(
        v2_grpc.infer_response_bytes(InferResponse("m", "1", "", outputs))
    )
    stream = pb.ModelStreamInferResponse.FromString(
        v2_grpc.stream_response_bytes(InferResponse("m", "1", "", outputs))
    )
    assert stream.infer_response == response and response.model_name == "m"
    assert [(t.name, t.datatype, list(t.shape)) for t in response.outputs] == [
        ("LOGITS", "FP32", [1, 2]),
        ("LABEL", "BYTES", [1, 1]),
    ]
    assert np.frombuffer(response.raw_output_contents[0], "<f4").tolist() == [1.0, -2.0]
    assert response.raw_output_contents[1] == b"\x04\x00\x00\x00left"
