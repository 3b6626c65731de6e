"""Build V2 inference requests the way a client library would (raw little-endian tensors)."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from attnserve.service.proto.inference import grpc_service_pb2 as pb
from tokenizers import Tokenizer


def bytes_raw(items: Sequence[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(item)) + item for item in items)


def text_request(
    model: str, texts: Sequence[str], *, request_id: str = "", outputs: Sequence[str] = (), version: str = ""
) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=model, model_version=version, id=request_id)
    request.inputs.add(name="TEXT", datatype="BYTES", shape=[len(texts), 1])
    request.raw_input_contents.append(bytes_raw([text.encode() for text in texts]))
    for name in outputs:
        request.outputs.add(name=name)
    return request


def ids_request(
    model: str, ids: np.ndarray, mask: np.ndarray, *, request_id: str = "", outputs: Sequence[str] = ()
) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=model, id=request_id)
    for name, array in (("INPUT_IDS", ids), ("ATTENTION_MASK", mask)):
        request.inputs.add(name=name, datatype="INT64", shape=array.shape)
        request.raw_input_contents.append(np.ascontiguousarray(array, dtype="<i8").tobytes())
    for name in outputs:
        request.outputs.add(name=name)
    return request


def tokenize(tokenizer_file: Path, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded ids and mask [B, T] with the bundle's own tokenizer."""
    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    rows = [tokenizer.encode(text).ids for text in texts]
    width = max(len(row) for row in rows)
    ids = np.zeros((len(rows), width), dtype=np.int64)  # [B, T]
    mask = np.zeros((len(rows), width), dtype=np.int64)  # [B, T]
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    return ids, mask


def output(response: pb.ModelInferResponse, name: str) -> np.ndarray:
    """Decode one output from raw_output_contents, located by its position in `outputs`."""
    names = [tensor.name for tensor in response.outputs]
    index = names.index(name)
    tensor, raw = response.outputs[index], response.raw_output_contents[index]
    if tensor.datatype == "BYTES":
        items, offset = [], 0
        while offset < len(raw):
            (length,) = struct.unpack_from("<I", raw, offset)
            items.append(raw[offset + 4 : offset + 4 + length].decode())
            offset += 4 + length
        return np.array(items, dtype=object).reshape(tuple(tensor.shape))
    dtype = {"FP32": "<f4", "INT64": "<i8"}[tensor.datatype]
    return np.frombuffer(raw, dtype=dtype).reshape(tuple(tensor.shape))
