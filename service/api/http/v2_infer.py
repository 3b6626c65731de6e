"""The V2 REST inference exchange (`infer`, the route's work): the body read once at the edge
(v2_codec.py), the plane asked, the reply written. The reply's JSON part is typed (what
`encode_response` writes, what the OpenAPI document shows); an output goes out as Triton's
binary tensor data after it when its request asked for `binary_data` (or the request for
`binary_data_output`), else as a flat JSON `data` list."""

from __future__ import annotations

import json
from collections.abc import Mapping
from operator import methodcaller
from typing import Any, NotRequired

from pydantic import with_config
from starlette.requests import Request
from starlette.responses import Response
from typing_extensions import TypedDict

from attnserve.service.api.http.handlers import Handlers
from attnserve.service.api.http.v2_codec import HEADER_LENGTH, parse_request
from attnserve.service.api.http.v2_info import CLOSED
from attnserve.service.api.v2.plane import V2Plane
from attnserve.service.api.v2.types import InferResponse
from attnserve.service.calls.record import Call
from attnserve.service.edges import check_text

_DECODE = methodcaller("decode", "utf-8", "replace")  # per BYTES element, a C call


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


async def infer(plane: V2Plane, handlers: Handlers, request: Request, call: Call) -> Response:
    """A REST inference call, the route's work: its body read once into the plane's request
    (and let go before the model runs), the plane's response written as the reply."""
    body = await handlers.body(request, call)
    path = request.path_params
    name, version = str(path.get("name", "")), str(path.get("version", ""))
    for key, value in (("name", name), ("version", version)):
        if not value.isascii():  # ASCII is valid Unicode
            check_text(value, field=key)
    rest = parse_request(body, request.headers.get(HEADER_LENGTH), name, version)
    del body
    response = await plane.infer(rest.request, call)
    content, header_length = encode_response(response, rest.binary, rest.binary_default)
    if header_length is None:
        return Response(content, media_type="application/json")
    return Response(
        content,
        media_type="application/octet-stream",
        headers={"Inference-Header-Content-Length": str(header_length)},
    )


def encode_response(
    response: InferResponse, binary_of: Mapping[str, bool], binary_default: bool
) -> tuple[bytes, int | None]:
    """The REST reply body, and the JSON part's length when binary data follows it (an output
    goes out as binary data as `binary_of` says, else as `binary_default` says)."""
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
        array = tensor.array  # numeric data; BYTES come as items, and framed already (api/v2/reply.py)
        if binary_of.get(tensor.name, binary_default):
            raw = tensor.raw if array is None else array.tobytes()
            item["parameters"] = {"binary_data_size": len(raw)}
            binary.append(raw)
        elif tensor.items is not None:
            item["data"] = list(map(_DECODE, tensor.items))
        elif array is not None:
            item["data"] = array.reshape(-1).tolist()
        else:
            raise ValueError(f"output {tensor.name} holds no data")
        outputs.append(item)
    header = json.dumps(document, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
    if not binary:
        return header, None
    return header + b"".join(binary), len(header)
