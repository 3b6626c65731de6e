"""V2 REST inference: its request body (JSON, and Triton's binary tensor extension) read
into the V2 data plane's types (the exchange: v2_infer.py).

Request body: a JSON object, optionally followed by binary tensor data when the
`Inference-Header-Content-Length` header gives the JSON part's length. An input with the
`binary_data_size` parameter takes that many bytes of the binary part, inputs in order;
the others carry `data` (flat or nested row-major). Numeric data becomes raw little-endian
tensor data, BYTES data its elements, the forms the V2 plane checks against shape and
datatype.

The other replies (metadata, configuration, statistics, the repository index): v2_info.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from operator import methodcaller
from typing import Any

import numpy as np

from attnserve.service.api.v2 import attribution
from attnserve.service.api.v2.contract import ATTENTION_MODE, LONG_TEXT, parse_attention_mode
from attnserve.service.api.v2.tensors import MAX_RANK, NUMERIC_DTYPES
from attnserve.service.api.v2.types import InferRequest, InputTensor, RequestedOutput
from attnserve.service.common.vocabulary import AttentionMode
from attnserve.service.edges import check_text, parse_json, parse_long_text, parse_uint, quote
from attnserve.service.errors import InvalidArgument

HEADER_LENGTH = "inference-header-content-length"
_END = object()
# Per element, a C call rather than a comprehension. surrogatepass: a lone surrogate reaches
# the UTF-8 check, which names the element.
_ENCODE = methodcaller("encode", "utf-8", "surrogatepass")
_INT, _NUMBER = frozenset((int,)), frozenset((int, float))  # JSON's types: a bool is not an int


@dataclass(slots=True)
class RestRequest:
    request: InferRequest
    binary: dict[str, bool] = field(default_factory=dict)  # output name -> send as binary
    binary_default: bool = False  # for outputs the request did not list


def _not_object(where: str) -> InvalidArgument:
    return InvalidArgument(f"{where}: expected a JSON object")


def _parameters(item: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The `parameters` object of a request, input or output (empty when absent)."""
    parameters = item.get("parameters", {})
    if not isinstance(parameters, dict):
        raise _not_object(f"{where}.parameters")
    return parameters


def _string(item: Mapping[str, Any], key: str, where: str) -> str:
    """A required non-empty string field of an input or output, valid Unicode."""
    value = item.get(key)
    if not isinstance(value, str) or not value:
        raise InvalidArgument(f"{where}.{key}: expected a non-empty string")
    if not value.isascii():  # ASCII is valid Unicode
        check_text(value, field=f"{where}.{key}")
    return value


def _attention_mode(parameters: Mapping[str, Any], field: str) -> AttentionMode | None:
    if ATTENTION_MODE not in parameters:
        return None
    return parse_attention_mode(parameters[ATTENTION_MODE], field)


def _flatten(data: list[object], where: str) -> list[object]:
    """Row-major elements of a nested JSON list (iterative: no recursion limit)."""
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
    if not isinstance(data, list):
        raise InvalidArgument(f"{where}.data: expected a list")
    values = data
    kinds = set(map(type, values))  # the elements' types, checked below against the datatype
    if list in kinds:  # nested rows: flattened row-major
        values = _flatten(data, where)
        kinds = set(map(type, values))
    if datatype == "BYTES":
        if not kinds <= {str}:
            raise InvalidArgument(f"{where}.data: BYTES elements must be strings")
        return InputTensor(name, datatype, shape, values=list(map(_ENCODE, values)))
    dtype = NUMERIC_DTYPES.get(datatype)
    if dtype is None:
        raise InvalidArgument(f"{where}.datatype: unknown datatype {quote(datatype, 16)}")
    allowed = {bool} if datatype == "BOOL" else _INT if dtype.kind in "iu" else _NUMBER
    if not kinds <= allowed:
        raise InvalidArgument(f"{where}.data: elements do not match datatype {datatype}")
    try:
        array = np.array(values, dtype=dtype)
    except (OverflowError, ValueError):
        raise InvalidArgument(f"{where}.data: a value is out of range for {datatype}") from None
    return InputTensor(name, datatype, shape, raw=array.tobytes())


def parse_request(body: bytes, header_length: str | None, name: str, version: str) -> RestRequest:
    """The V2 plane's request for a REST inference call (model name and version from the URL)."""
    binary = b""
    if header_length is not None:
        split = parse_uint(header_length.strip(), field="Inference-Header-Content-Length", maximum=len(body))
        body, binary = body[:split], body[split:]
    document = parse_json(body)
    if not isinstance(document, dict):
        raise _not_object("request body")
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
    for index, item in enumerate(items):
        where = f"inputs[{index}]"
        if not isinstance(item, dict):
            raise _not_object(where)
        shape = item.get("shape")
        if (
            not isinstance(shape, list)
            or len(shape) > MAX_RANK
            or not set(map(type, shape)) <= _INT
            or (shape and not 0 <= min(shape) <= max(shape) < 2**31)
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
    for index, item in enumerate(outputs_json):
        where = f"outputs[{index}]"
        if not isinstance(item, dict):
            raise _not_object(where)
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
