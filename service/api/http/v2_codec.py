"""V2 REST bodies (JSON, and Triton's binary tensor extension) to and from the V2 data
plane's types.

Request body: a JSON object, optionally followed by binary tensor data when the
`Inference-Header-Content-Length` header gives the JSON part's length. An input with the
`binary_data_size` parameter takes that many bytes of the binary part, inputs in order;
the others carry `data` (flat or nested row-major). Numeric data becomes raw little-endian
tensor data, BYTES data its elements, the forms the V2 plane checks against shape and
datatype.

Response: an output goes out as binary data when its request asked for `binary_data`
(or the request for `binary_data_output`), else as a flat JSON `data` list. `infer` is the
whole exchange: the body read once at the edge, the plane asked, the reply written.

The other replies (metadata, configuration, statistics, the repository index): v2_info.py.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NotRequired

import numpy as np
from pydantic import with_config
from starlette.requests import Request
from starlette.responses import Response
from typing_extensions import TypedDict

from attnserve.service.api.http.handlers import Handlers
from attnserve.service.api.http.v2_info import CLOSED
from attnserve.service.api.v2 import attribution
from attnserve.service.api.v2.contract import ATTENTION_MODE, LONG_TEXT, parse_attention_mode
from attnserve.service.api.v2.plane import V2Plane
from attnserve.service.api.v2.tensors import MAX_RANK, NUMERIC_DTYPES
from attnserve.service.api.v2.types import (
    InferRequest,
    InferResponse,
    InputTensor,
    OutputTensor,
    RequestedOutput,
)
from attnserve.service.calls.record import Call
from attnserve.service.common.vocabulary import AttentionMode
from attnserve.service.edges import check_text, parse_json, parse_long_text, parse_uint, quote
from attnserve.service.errors import InvalidArgument

HEADER_LENGTH = "inference-header-content-length"
_END = object()


@dataclass(slots=True)
class RestRequest:
    request: InferRequest
    binary: dict[str, bool] = field(default_factory=dict)  # output name -> send as binary
    binary_default: bool = False  # for outputs the request did not list


def _object(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidArgument(f"{where}: expected a JSON object")
    return value


def _parameters(item: Mapping[str, Any], where: str) -> dict[str, Any]:
    return _object(item.get("parameters", {}), f"{where}.parameters")


def _attention_mode(parameters: Mapping[str, Any], field: str) -> AttentionMode | None:
    if ATTENTION_MODE not in parameters:
        return None
    return parse_attention_mode(parameters[ATTENTION_MODE], field)


def _string(item: Mapping[str, Any], key: str, where: str, *, required: bool = True) -> str:
    value = item.get(key, None if required else "")
    if not isinstance(value, str) or (required and not value):
        raise InvalidArgument(f"{where}.{key}: expected a {'non-empty ' if required else ''}string")
    return value if value.isascii() else check_text(value, field=f"{where}.{key}")  # ASCII is valid


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


def _tensor_from_json(
    name: str, datatype: str, shape: tuple[int, ...], data: object, where: str
) -> InputTensor:
    values = _flatten(data, where)
    if datatype == "BYTES":
        if not all(isinstance(v, str) for v in values):
            raise InvalidArgument(f"{where}.data: BYTES elements must be strings")
        # surrogatepass: a lone surrogate reaches the UTF-8 check, which names the element
        items = [str(v).encode("utf-8", "surrogatepass") for v in values]
        return InputTensor(name, datatype, shape, values=items)
    dtype = NUMERIC_DTYPES.get(datatype)
    if dtype is None:
        raise InvalidArgument(f"{where}.datatype: unknown datatype {quote(datatype, 16)}")
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
    return InputTensor(name, datatype, shape, raw=array.tobytes())


def path_param(request: Request, key: str) -> str:
    """A path parameter of the route, valid Unicode (ASCII is, without a look)."""
    value = str(request.path_params.get(key, ""))
    return value if value.isascii() else check_text(value, field=key)


async def infer(plane: V2Plane, handlers: Handlers, request: Request, call: Call) -> Response:
    """A REST inference call, the route's work: its body read once into the plane's request
    (and let go before the model runs), the plane's response written as the reply."""
    body = await handlers.body(request, call)
    rest = parse_request(
        body, request.headers.get(HEADER_LENGTH), path_param(request, "name"), path_param(request, "version")
    )
    del body
    content, header_length = encode_response(await plane.infer(rest.request, call), rest)
    if header_length is None:
        return Response(content, media_type="application/json")
    return Response(
        content,
        media_type="application/octet-stream",
        headers={"Inference-Header-Content-Length": str(header_length)},
    )


def parse_request(body: bytes, header_length: str | None, name: str, version: str) -> RestRequest:
    """The V2 plane's request for a REST inference call (model name and version from the URL)."""
    binary = b""
    if header_length is not None:
        split = parse_uint(header_length.strip(), field="Inference-Header-Content-Length", maximum=len(body))
        body, binary = body[:split], body[split:]
    document = _object(parse_json(body), "request body")
    request_id = document.get("id", "")
    if not isinstance(request_id, str):
        raise InvalidArgument("id: expected a string")
    if not request_id.isascii():
        check_text(request_id, field="id")
    parameters = _parameters(document, "request")
    binary_default = parameters.get("binary_data_output", False)
    if not isinstance(binary_default, bool):
        raise InvalidArgument("parameters.binary_data_output: expected true or false")
    items = document.get("inputs")
    if not isinstance(items, list) or not items:
        raise InvalidArgument("inputs: expected a non-empty list of input tensors")
    inputs: list[InputTensor] = []
    offset = 0
    for index, raw_item in enumerate(items):
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
        input_name, datatype = _string(item, "name", where), _string(item, "datatype", where)
        size = _parameters(item, where).get("binary_data_size")
        if size is not None:
            if not isinstance(size, int) or isinstance(size, bool) or size < 0 or offset + size > len(binary):
                raise InvalidArgument(
                    f"{where}.parameters.binary_data_size: {quote(size, 20)} does not fit the "
                    f"{len(binary) - offset} bytes of binary data left"
                )
            if "data" in item:
                raise InvalidArgument(f"{where}: has both data and binary_data_size")
            inputs.append(InputTensor(input_name, datatype, tuple(shape), raw=binary[offset : offset + size]))
            offset += size
        elif "data" in item:
            inputs.append(_tensor_from_json(input_name, datatype, tuple(shape), item["data"], where))
        else:
            raise InvalidArgument(f"{where}: no data (give data, or binary_data_size with binary data)")
    if offset != len(binary):
        raise InvalidArgument(f"request body: {len(binary) - offset} bytes of binary data belong to no input")
    outputs_json = document.get("outputs", [])
    if not isinstance(outputs_json, list):
        raise InvalidArgument("outputs: expected a list")
    outputs: list[RequestedOutput] = []
    binary_of: dict[str, bool] = {}
    for index, raw_item in enumerate(outputs_json):
        where = f"outputs[{index}]"
        item = _object(raw_item, where)
        output_name = _string(item, "name", where)
        output_parameters = _parameters(item, where)
        wants_binary = output_parameters.get("binary_data", binary_default)
        if not isinstance(wants_binary, bool):
            raise InvalidArgument(f"{where}.parameters.binary_data: expected true or false")
        binary_of[output_name] = wants_binary
        outputs.append(
            RequestedOutput(
                output_name,
                "classification" in output_parameters,
                _attention_mode(output_parameters, f"{where}.parameters.{ATTENTION_MODE}"),
            )
        )
    request = InferRequest(name, version, request_id, inputs, outputs)
    if parameters:  # else every default
        method, budget, label = None, 0, ""
        if any(name in parameters for name in attribution.PARAMETERS):
            method, budget, label = attribution.read_parameters(parameters)
        request = replace(
            request,
            attention_mode=_attention_mode(parameters, f"parameters.{ATTENTION_MODE}"),
            attribution=method,
            attribution_budget=budget,
            attribution_label=label,
            long_text=parse_long_text(parameters[LONG_TEXT], field=f"parameters.{LONG_TEXT}")
            if LONG_TEXT in parameters
            else None,
        )
    return RestRequest(request, binary_of, binary_default)


def _json_data(tensor: OutputTensor) -> list[Any]:
    if tensor.items is not None:
        return [item.decode("utf-8", "replace") for item in tensor.items]
    if tensor.array is None:
        raise ValueError(f"output {tensor.name} holds no data")
    values: list[Any] = tensor.array.reshape(-1).tolist()
    return values


@with_config(CLOSED)
class BinaryDataJson(TypedDict):
    binary_data_size: int


@with_config(CLOSED)
class OutputJson(TypedDict):
    name: str
    datatype: str
    shape: list[int]
    data: NotRequired[list[Any]]  # flat row-major, unless the output goes out as binary data
    parameters: NotRequired[BinaryDataJson]


@with_config(CLOSED)
class InferResponseJson(TypedDict):
    """The JSON part of an inference reply: what `encode_response` writes, and what the
    OpenAPI document shows."""

    model_name: str
    model_version: str
    id: NotRequired[str]
    outputs: list[OutputJson]


def encode_response(response: InferResponse, rest: RestRequest) -> tuple[bytes, int | None]:
    """The REST reply body, and the JSON part's length when binary data follows it."""
    outputs: list[OutputJson] = []
    document: InferResponseJson = {
        "model_name": response.model_name,
        "model_version": response.model_version,
        "outputs": outputs,
    }
    if response.id:
        document["id"] = response.id
    binary: list[bytes] = []
    for tensor in response.outputs:
        item: OutputJson = {"name": tensor.name, "datatype": tensor.datatype, "shape": list(tensor.shape)}
        if rest.binary.get(tensor.name, rest.binary_default):
            array = tensor.array  # numeric data; BYTES come framed already (api/v2/reply.py)
            raw = tensor.raw if array is None else array.tobytes()
            item["parameters"] = {"binary_data_size": len(raw)}
            binary.append(raw)
        else:
            item["data"] = _json_data(tensor)
        outputs.append(item)
    header = dumps(document)
    if not binary:
        return header, None
    return header + b"".join(binary), len(header)


def dumps(document: object) -> bytes:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
