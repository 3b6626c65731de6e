"""The raw form of V2 BYTES tensors: each element a 4-byte little-endian length, then its
bytes (raw_input_contents, raw_output_contents and REST binary data alike)."""

from __future__ import annotations

import struct
from collections.abc import Sequence

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
