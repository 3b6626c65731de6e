"""Tensor data of the Open Inference Protocol (V2), independent of the wire it came on.

An input's data is either raw (one buffer, row-major, little endian; a BYTES element is a
4-byte little-endian length then its bytes) or typed values. Outputs (reply.py) go out raw on
every transport that can carry it: tritonclient decodes numeric gRPC outputs only from
raw_output_contents and locates raw data by output position, so one typed output among
raw ones would shift every later tensor.

Every error is an `InvalidArgument` whose message names the tensor.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np

from attnserve.service.api.v2.types import InputTensor
from attnserve.service.edges import quote
from attnserve.service.errors import InvalidArgument

_LENGTH = struct.Struct("<I")


def encode_bytes(items: Sequence[bytes]) -> bytes:
    """BYTES elements as raw tensor data: each a 4-byte little-endian length, then the bytes."""
    parts: list[bytes] = []
    for item in items:
        parts.append(_LENGTH.pack(len(item)))
        parts.append(item)
    return b"".join(parts)


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


# Elements one input may declare: a request body is at most a few hundred MiB, so even a
# 1-byte element type cannot fill more.
MAX_ELEMENTS = 2**32
MAX_RANK = 8
_SHOWN_DIMS = 8  # dimensions spelled out in a message; a longer shape is cut

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
    """A shape for a message, bounded: a client may send 100,000 dimensions."""
    shown = ", ".join(str(d) if -(2**63) <= d < 2**63 else quote(d) for d in shape[:_SHOWN_DIMS])
    more = f", ... ({len(shape)} dimensions)" if len(shape) > _SHOWN_DIMS else ""
    return f"[{shown}{more}]"


def require(tensor: InputTensor, datatype: str, shape: Sequence[int]) -> None:
    """Check datatype and shape against the model's declaration (-1 matches any size >= 1)."""
    if tensor.datatype != datatype:
        given = tensor.datatype[:16] or "(empty)"
        raise InvalidArgument(f"input {tensor.name}: datatype {given}, expected {datatype}")
    fits = len(tensor.shape) == len(shape)
    if fits:  # a loop, not a generator: no call per dimension
        for have, want in zip(tensor.shape, shape, strict=True):
            if have < 1 or (want != -1 and have != want):
                fits = False
                break
    if not fits:
        raise InvalidArgument(
            f"input {tensor.name}: shape {format_shape(tensor.shape)} does not match {format_shape(shape)}"
        )


def element_count(tensor: InputTensor) -> int:
    """The shape's element count, in exact integer arithmetic (numpy's int64 product wraps
    around: [2**32, 2**32] gave 0 and [2**62, 4] a negative size). A shape beyond
    MAX_ELEMENTS is refused before anything is sized by it."""
    count = 1
    for dim in tensor.shape:
        if dim < 0:
            raise InvalidArgument(
                f"input {tensor.name}: shape {format_shape(tensor.shape)} has a negative size"
            )
        count *= dim
        if count > MAX_ELEMENTS:
            raise InvalidArgument(
                f"input {tensor.name}: shape {format_shape(tensor.shape)} has more than {MAX_ELEMENTS} "
                "elements, more than any request can carry"
            )
    return count


def texts_of(tensor: InputTensor, shape: Sequence[int]) -> list[str]:
    """A BYTES input declared with `shape`, checked (`require`) and decoded (`decode_bytes`)."""
    require(tensor, "BYTES", shape)
    return decode_bytes(tensor)


def decode_bytes(tensor: InputTensor) -> list[str]:
    """The BYTES elements of `tensor` as text (strict UTF-8), checked against its shape."""
    count = element_count(tensor)
    elements: Sequence[bytes]
    if tensor.raw is not None:
        elements = split_bytes(tensor.raw, tensor.name)
    elif tensor.values is not None:
        elements = tensor.values  # type: ignore[assignment]  # BYTES values are bytes
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


def decode_int64(tensor: InputTensor) -> np.ndarray:
    """The INT64 data of `tensor` as an int64 array of its shape."""
    count = element_count(tensor)
    if tensor.raw is not None:
        expected = count * 8
        if len(tensor.raw) != expected:
            raise InvalidArgument(
                f"input {tensor.name}: raw data has {len(tensor.raw)} bytes, "
                f"INT64 shape {format_shape(tensor.shape)} needs {expected}"
            )
        array = np.frombuffer(tensor.raw, dtype="<i8")
    elif tensor.values is not None:
        values = tensor.values
        if len(values) != count:
            raise InvalidArgument(
                f"input {tensor.name}: int64_contents has {len(values)} values, "
                f"shape {format_shape(tensor.shape)} needs {count}"
            )
        array = np.fromiter(values, dtype=np.int64, count=count)
    else:
        raise InvalidArgument(f"input {tensor.name}: no data (neither raw_input_contents nor contents)")
    return array.astype(np.int64, copy=False).reshape(tensor.shape)
