"""V2 inference over HTTP/REST: JSON (and Triton's binary tensor extension) to and from the
protocol's messages, so REST requests run exactly the gRPC V2 path.

Request body: a JSON object, optionally followed by binary tensor data when the
`Inference-Header-Content-Length` header gives the JSON part's length. An input with the
`binary_data_size` parameter takes that many bytes of the binary part, inputs in order;
the others carry `data` (flat or nested row-major). Every input becomes raw little-endian
tensor data, the form the V2 decoder checks against shape and datatype.

Response: an output goes out as binary data when its request asked for `binary_data`
(or the request for `binary_data_output`), else as a flat JSON `data` list.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attnserve.service.api.http.calls import parse_json
from attnserve.service.api.v2.codec import NUMERIC_DTYPES, encode_bytes, split_bytes
from attnserve.service.errors import InvalidArgument
from attnserve.service.proto.inference import grpc_service_pb2 as pb

HEADER_LENGTH = "inference-header-content-length"
MAX_RANK = 8
_END = object()


@dataclass(slots=True)
class RestRequest:
    message: pb.ModelInferRequest
    binary: dict[str, bool] = field(default_factory=dict)  # output name -> send as binary
    binary_default: bool = False  # for outputs the request did not list


def _object(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidArgument(f"{where}: expected a JSON object")
    return value


def _parameters(item: Mapping[str, Any], where: str) -> dict[str, Any]:
    return _object(item.get("parameters", {}), f"{where}.parameters")


def _string(item: Mapping[str, Any], key: str, where: str, *, required: bool = True) -> str:
    value = item.get(key, None if required else "")
    if not isinstance(value, str) or (required and not value):
        raise InvalidArgument(f"{where}.{key}: expected a {'non-empty ' if required else ''}string")
    return value


def _flatten(data: object, where: str) -> list[object]:
    """Row-major elements of a flat or nested JSON list (iterative: no recursion limit)."""
    if not isinstance(data, list):
        raise InvalidArgument(f"{where}.data: expected a list")
    flat: list[object] = []
    stack = [iter(data)]
    while stack:
        item = next(stack[-1], _END)
        if item is _END:
            stack.pop()
        elif isinstance(item, list):
            if len(stack) >= MAX_RANK:
                raise InvalidArgument(f"{where}.data: nested deeper than {MAX_RANK} levels")
            stack.append(iter(item))
        else:
            flat.append(item)
    return flat


def _raw_from_json(data: object, datatype: str, where: str) -> bytes:
    values = _flatten(data, where)
    if datatype == "BYTES":
        if not all(isinstance(v, str) for v in values):
            raise InvalidArgument(f"{where}.data: BYTES elements must be strings")
        return encode_bytes([str(v).encode("utf-8", "surrogatepass") for v in values])
    dtype = NUMERIC_DTYPES.get(datatype)
    if dtype is None:
        raise InvalidArgument(f"{where}.datatype: unknown datatype {datatype[:16]!r}")
    if datatype == "BOOL":
        valid = all(isinstance(v, bool) for v in values)
    elif dtype.kind in "iu":
        valid = all(isinstance(v, int) and not isinstance(v, bool) for v in values)
    else:
        valid = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    if not valid:
        raise InvalidArgument(f"{where}.data: elements do not match datatype {datatype}")
    try:
        array = np.array(values, dtype=dtype)
    except (OverflowError, ValueError):
        raise InvalidArgument(f"{where}.data: a value is out of range for {datatype}") from None
    return array.tobytes()


def parse_request(body: bytes, header_length: str | None, name: str, version: str) -> RestRequest:
    """The protocol message for a REST inference request (model name and version from the URL)."""
    binary = b""
    if header_length is not None:
        if not header_length.strip().isdigit() or int(header_length) > len(body):
            raise InvalidArgument(
                f"Inference-Header-Content-Length: {header_length[:20]!r} is not a length within the body"
            )
        split = int(header_length)
        body, binary = body[:split], body[split:]
    document = _object(parse_json(body), "request body")
    message = pb.ModelInferRequest(model_name=name, model_version=version)
    request_id = document.get("id", "")
    if not isinstance(request_id, str):
        raise InvalidArgument("id: expected a string")
    message.id = request_id
    parameters = _parameters(document, "request")
    binary_default = parameters.get("binary_data_output", False)
    if not isinstance(binary_default, bool):
        raise InvalidArgument("parameters.binary_data_output: expected true or false")
    inputs = document.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        raise InvalidArgument("inputs: expected a non-empty list of input tensors")
    offset = 0
    for index, raw_item in enumerate(inputs):
        where = f"inputs[{index}]"
        item = _object(raw_item, where)
        shape = item.get("shape")
        if (
            not isinstance(shape, list)
            or len(shape) > MAX_RANK
            or not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**31 for d in shape)
        ):
            raise InvalidArgument(
                f"{where}.shape: expected a list of at most {MAX_RANK} non-negative integers"
            )
        tensor = message.inputs.add(
            name=_string(item, "name", where), datatype=_string(item, "datatype", where), shape=shape
        )
        size = _parameters(item, where).get("binary_data_size")
        if size is not None:
            if not isinstance(size, int) or isinstance(size, bool) or size < 0 or offset + size > len(binary):
                raise InvalidArgument(
                    f"{where}.parameters.binary_data_size: {str(size)[:20]} does not fit the "
                    f"{len(binary) - offset} bytes of binary data left"
                )
            if "data" in item:
                raise InvalidArgument(f"{where}: has both data and binary_data_size")
            message.raw_input_contents.append(binary[offset : offset + size])
            offset += size
        elif "data" in item:
            message.raw_input_contents.append(_raw_from_json(item["data"], tensor.datatype, where))
        else:
            raise InvalidArgument(f"{where}: no data (give data, or binary_data_size with binary data)")
    if offset != len(binary):
        raise InvalidArgument(f"request body: {len(binary) - offset} bytes of binary data belong to no input")
    request = RestRequest(message, binary_default=binary_default)
    outputs = document.get("outputs", [])
    if not isinstance(outputs, list):
        raise InvalidArgument("outputs: expected a list")
    for index, raw_item in enumerate(outputs):
        where = f"outputs[{index}]"
        item = _object(raw_item, where)
        output = message.outputs.add(name=_string(item, "name", where))
        output_parameters = _parameters(item, where)
        wants_binary = output_parameters.get("binary_data", binary_default)
        if not isinstance(wants_binary, bool):
            raise InvalidArgument(f"{where}.parameters.binary_data: expected true or false")
        request.binary[output.name] = wants_binary
        if "classification" in output_parameters:
            output.parameters["classification"].int64_param = 1  # refused by name downstream
    return request


def _json_data(datatype: str, raw: bytes, name: str) -> list[Any]:
    if datatype == "BYTES":
        return [item.decode("utf-8", "replace") for item in split_bytes(raw, name)]
    values: list[Any] = np.frombuffer(raw, dtype=NUMERIC_DTYPES[datatype]).tolist()
    return values


def encode_response(response: pb.ModelInferResponse, request: RestRequest) -> tuple[bytes, int | None]:
    """The REST reply body, and the JSON part's length when binary data follows it."""
    document: dict[str, Any] = {"model_name": response.model_name, "model_version": response.model_version}
    if response.id:
        document["id"] = response.id
    outputs: list[dict[str, Any]] = []
    binary: list[bytes] = []
    for tensor, raw in zip(response.outputs, response.raw_output_contents, strict=True):
        item: dict[str, Any] = {"name": tensor.name, "datatype": tensor.datatype, "shape": list(tensor.shape)}
        if request.binary.get(tensor.name, request.binary_default):
            item["parameters"] = {"binary_data_size": len(raw)}
            binary.append(raw)
        else:
            item["data"] = _json_data(tensor.datatype, raw, tensor.name)
        outputs.append(item)
    document["outputs"] = outputs
    header = dumps(document)
    if not binary:
        return header, None
    return header + b"".join(binary), len(header)


def dumps(document: object) -> bytes:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
