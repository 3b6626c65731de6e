"""Tensor encoding of the Open Inference Protocol (V2): request inputs in, response outputs out.

Inputs arrive either in `raw_input_contents` (one entry per input, in order, row-major,
little endian; a BYTES element is a 4-byte little-endian length then its bytes) or in each
input's typed `contents`. Outputs always go out in `raw_output_contents`: tritonclient
decodes numeric outputs only from there and locates raw data by output position, so one
typed output among raw ones would shift every later tensor.

Every error is an `InvalidArgument` whose message names the tensor.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from attnserve.service.errors import InvalidArgument
from attnserve.service.proto.inference import grpc_service_pb2 as pb

_LENGTH = struct.Struct("<I")
# Elements one input may declare: a request body is at most a few hundred MiB, so even a
# 1-byte element type cannot fill more.
MAX_ELEMENTS = 2**32

# Protocol datatype -> numpy dtype (little endian) for fixed-size types.
NUMERIC_DTYPES: dict[str, np.dtype[np.generic]] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype("u1"),
    "UINT16": np.dtype("<u2"),
    "UINT32": np.dtype("<u4"),
    "UINT64": np.dtype("<u8"),
    "INT8": np.dtype("i1"),
    "INT16": np.dtype("<i2"),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "FP16": np.dtype("<f2"),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
}


def format_shape(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


@dataclass(frozen=True, slots=True)
class InputTensor:
    """One request input with its data source resolved (raw bytes or typed contents)."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    raw: bytes | None
    contents: pb.InferTensorContents | None

    def require(self, datatype: str, shape: Sequence[int]) -> None:
        """Check datatype and shape against the model's declaration (-1 matches any size >= 1)."""
        if self.datatype != datatype:
            given = self.datatype or "(empty)"
            raise InvalidArgument(f"input {self.name}: datatype {given}, expected {datatype}")
        if len(self.shape) != len(shape) or any(
            have < 1 or (want != -1 and have != want) for have, want in zip(self.shape, shape, strict=True)
        ):
            raise InvalidArgument(
                f"input {self.name}: shape {format_shape(self.shape)} does not match {format_shape(shape)}"
            )

    @property
    def element_count(self) -> int:
        """The shape's element count, in exact integer arithmetic (numpy's int64 product
        wraps around: [2**32, 2**32] gave 0 and [2**62, 4] a negative size). A shape beyond
        MAX_ELEMENTS is refused before anything is sized by it."""
        count = 1
        for dim in self.shape:
            if dim < 0:
                shape = format_shape(self.shape)
                raise InvalidArgument(f"input {self.name}: shape {shape} has a negative size")
            count *= dim
            if count > MAX_ELEMENTS:
                raise InvalidArgument(
                    f"input {self.name}: shape {format_shape(self.shape)} has more than {MAX_ELEMENTS} "
                    "elements, more than any request can carry"
                )
        return count


def collect_inputs(request: pb.ModelInferRequest) -> dict[str, InputTensor]:
    """Name -> input, checking the raw/typed layout the protocol allows."""
    raw = request.raw_input_contents
    if raw and len(raw) != len(request.inputs):
        raise InvalidArgument(
            f"raw_input_contents has {len(raw)} entries for {len(request.inputs)} inputs; "
            "it needs exactly one per input, in the order of inputs"
        )
    tensors: dict[str, InputTensor] = {}
    for index, spec in enumerate(request.inputs):
        if spec.name in tensors:
            raise InvalidArgument(f"input {spec.name}: given more than once")
        has_contents = spec.HasField("contents")
        if raw and has_contents:
            raise InvalidArgument(
                f"input {spec.name}: has typed contents although the request uses raw_input_contents"
            )
        tensors[spec.name] = InputTensor(
            name=spec.name,
            datatype=spec.datatype,
            shape=tuple(spec.shape),
            raw=raw[index] if raw else None,
            contents=spec.contents if has_contents else None,
        )
    return tensors


def decode_bytes(tensor: InputTensor) -> list[str]:
    """The BYTES elements of `tensor` as text (strict UTF-8), checked against its shape."""
    count = tensor.element_count
    if tensor.raw is not None:
        elements = split_bytes(tensor.raw, tensor.name)
    elif tensor.contents is not None:
        elements = list(tensor.contents.bytes_contents)
    else:
        raise InvalidArgument(f"input {tensor.name}: no data (neither raw_input_contents nor contents)")
    if len(elements) != count:
        raise InvalidArgument(
            f"input {tensor.name}: holds {len(elements)} elements, "
            f"shape {format_shape(tensor.shape)} needs {count}"
        )
    texts: list[str] = []
    for index, element in enumerate(elements):
        try:
            texts.append(element.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise InvalidArgument(
                f"input {tensor.name}: element {index} is not valid UTF-8 (byte {exc.start})"
            ) from None
    return texts


def split_bytes(data: bytes, name: str) -> list[bytes]:
    """BYTES raw tensor data back into its elements (the inverse of `encode_bytes`)."""
    elements: list[bytes] = []
    offset, end = 0, len(data)
    while offset < end:
        if end - offset < _LENGTH.size:
            raise InvalidArgument(f"input {name}: raw BYTES data ends inside an element's 4-byte length")
        (length,) = _LENGTH.unpack_from(data, offset)
        offset += _LENGTH.size
        if length > end - offset:
            raise InvalidArgument(
                f"input {name}: raw BYTES element {len(elements)} declares {length} bytes, "
                f"{end - offset} remain"
            )
        elements.append(data[offset : offset + length])
        offset += length
    return elements


def decode_int64(tensor: InputTensor) -> np.ndarray:
    """The INT64 data of `tensor` as an int64 array of its shape."""
    count = tensor.element_count
    if tensor.raw is not None:
        expected = count * 8
        if len(tensor.raw) != expected:
            raise InvalidArgument(
                f"input {tensor.name}: raw data has {len(tensor.raw)} bytes, "
                f"INT64 shape {format_shape(tensor.shape)} needs {expected}"
            )
        array = np.frombuffer(tensor.raw, dtype="<i8")
    elif tensor.contents is not None:
        values = tensor.contents.int64_contents
        if len(values) != count:
            raise InvalidArgument(
                f"input {tensor.name}: int64_contents has {len(values)} values, "
                f"shape {format_shape(tensor.shape)} needs {count}"
            )
        array = np.fromiter(values, dtype=np.int64, count=count)
    else:
        raise InvalidArgument(f"input {tensor.name}: no data (neither raw_input_contents nor contents)")
    return array.astype(np.int64, copy=False).reshape(tensor.shape)


def encode_bytes(items: Sequence[bytes]) -> bytes:
    """BYTES elements as raw tensor data: each a 4-byte little-endian length, then the bytes."""
    parts: list[bytes] = []
    for item in items:
        parts.append(_LENGTH.pack(len(item)))
        parts.append(item)
    return b"".join(parts)


class OutputWriter:
    """Appends output tensors to a response, metadata and raw data kept in step."""

    __slots__ = ("_response",)

    def __init__(self, response: pb.ModelInferResponse) -> None:
        self._response = response

    def numeric(self, name: str, datatype: str, array: np.ndarray) -> None:
        data = np.ascontiguousarray(array, dtype=NUMERIC_DTYPES[datatype])
        self._append(name, datatype, data.shape, data.tobytes())

    def bytes_tensor(self, name: str, shape: Sequence[int], items: Sequence[bytes]) -> None:
        self._append(name, "BYTES", shape, encode_bytes(items))

    def _append(self, name: str, datatype: str, shape: Sequence[int], raw: bytes) -> None:
        self._response.outputs.add(name=name, datatype=datatype, shape=shape)
        self._response.raw_output_contents.append(raw)
