"""The V2 tensor encoding on its own: BYTES framing, raw/typed layouts, shape checks."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from attnserve.service.api.v2.codec import (
    InputTensor,
    OutputWriter,
    collect_inputs,
    decode_bytes,
    decode_int64,
    encode_bytes,
)
from attnserve.service.errors import InvalidArgument
from attnserve.service.proto.inference import grpc_service_pb2 as pb


def _tensor(shape: tuple[int, ...], raw: bytes | None = None, datatype: str = "BYTES") -> InputTensor:
    return InputTensor(name="TEXT", datatype=datatype, shape=shape, raw=raw, contents=None)


@given(st.lists(st.text(max_size=40), min_size=1, max_size=8))
def test_bytes_round_trip(texts: list[str]) -> None:
    raw = encode_bytes([text.encode() for text in texts])
    assert decode_bytes(_tensor((len(texts), 1), raw)) == texts


@given(st.binary(max_size=64))
def test_arbitrary_bytes_decode_or_fail_cleanly(raw: bytes) -> None:
    try:
        decoded = decode_bytes(_tensor((1, 1), raw))
    except InvalidArgument as exc:
        assert exc.message.startswith("input TEXT:")
    else:
        assert encode_bytes([decoded[0].encode()]) == raw


def test_require_checks_datatype_and_every_dimension() -> None:
    _tensor((3, 1)).require("BYTES", (-1, 1))
    for shape, datatype in (((3,), "BYTES"), ((3, 2), "BYTES"), ((0, 1), "BYTES"), ((3, 1), "INT64")):
        with pytest.raises(InvalidArgument, match="input TEXT"):
            _tensor(shape, datatype=datatype).require("BYTES", (-1, 1))


def test_int64_from_raw_and_typed_contents() -> None:
    values = np.arange(6, dtype=np.int64).reshape(2, 3)
    raw = InputTensor("INPUT_IDS", "INT64", (2, 3), values.astype("<i8").tobytes(), None)
    contents = pb.InferTensorContents(int64_contents=values.ravel().tolist())
    typed = InputTensor("INPUT_IDS", "INT64", (2, 3), None, contents)
    np.testing.assert_array_equal(decode_int64(raw), values)
    np.testing.assert_array_equal(decode_int64(typed), values)
    short = InputTensor("INPUT_IDS", "INT64", (2, 3), b"\0" * 47, None)
    with pytest.raises(InvalidArgument, match="raw data has 47 bytes, INT64 shape \\[2, 3\\] needs 48"):
        decode_int64(short)


def test_collect_inputs_rejects_duplicates() -> None:
    request = pb.ModelInferRequest()
    request.inputs.add(name="TEXT", datatype="BYTES", shape=[1, 1])
    request.inputs.add(name="TEXT", datatype="BYTES", shape=[1, 1])
    with pytest.raises(InvalidArgument, match="input TEXT: given more than once"):
        collect_inputs(request)


def test_output_writer_keeps_metadata_and_raw_data_in_step() -> None:
    response = pb.ModelInferResponse()
    writer = OutputWriter(response)
    writer.numeric("LOGITS", "FP32", np.array([[1.0, -2.0]], dtype=np.float64))
    writer.bytes_tensor("LABEL", (1, 1), [b"left"])
    assert [(t.name, t.datatype, list(t.shape)) for t in response.outputs] == [
        ("LOGITS", "FP32", [1, 2]),
        ("LABEL", "BYTES", [1, 1]),
    ]
    assert np.frombuffer(response.raw_output_contents[0], "<f4").tolist() == [1.0, -2.0]
    assert response.raw_output_contents[1] == b"\x04\x00\x00\x00left"
