"""The HTTP port's bodies, and the OpenAPI 3.1 document built from them (served at
/openapi.json, read by /docs, and the schema the test suite checks every reply against).

One source: the JSON API's replies are the native plane's own types, which the routes
write with the same pydantic adapters, its request body is the model the route parses it
with; the V2 server metadata, model metadata and repository index are the V2 plane's own
types, written field for field; the V2 configuration and statistics replies, which the
routes write in Triton's form, and the inference reply's JSON part are the typed dicts that
the routes return (v2_info.py, v2_codec.py).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from pydantic.json_schema import JsonSchemaMode

from attnserve.service.api.http.native import ClassifyBody
from attnserve.service.api.http.v2_infer import InferResponseJson
from attnserve.service.api.http.v2_info import ModelConfigJson, ModelStatisticsJson
from attnserve.service.api.native.types import ClassifyReply, ModelList
from attnserve.service.api.v2 import types as v2
from attnserve.service.common.model_info import ModelInfo

V2Datatype = Literal[
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
    "FP16", "FP32", "FP64", "BYTES",
]  # fmt: skip


class _Reply(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- the JSON API: its replies are the native plane's own types (api/native/types.py) ----
class ErrorDetail(_Reply):
    code: str = Field(examples=["INVALID_ARGUMENT"])
    message: str


class Error(_Reply):
    error: ErrorDetail


# --- KServe V2 REST ----------------------------------------------------------------------------
class V2Error(_Reply):
    error: str


class InferInput(BaseModel):
    name: str = Field(min_length=1)
    datatype: V2Datatype
    shape: list[Annotated[int, Field(ge=0)]] = Field(max_length=8)
    data: list[Any] | None = Field(
        None, description="Flat or nested row-major; absent with binary_data_size."
    )
    parameters: dict[str, Any] | None = None


class InferRequestedOutput(BaseModel):
    name: str = Field(min_length=1)
    parameters: dict[str, Any] | None = Field(
        None,
        description="binary_data (bool); on ATTENTION, attention_mode: pooled (default), "
        "last_layer, all or rollout.",
    )


class InferRequest(BaseModel):
    id: str | None = None
    parameters: dict[str, Any] | None = Field(
        None,
        description="binary_data_output (bool); attention_mode (as on the ATTENTION output, "
        "for clients that set no output parameters); attribution (none, occlusion or shapley: "
        "the ATTRIBUTION and ATTRIBUTION_ROWS outputs) and attribution_budget (int, shapley's "
        "coalitions per text).",
    )
    inputs: list[InferInput] = Field(min_length=1)
    outputs: list[InferRequestedOutput] | None = None


class RepositoryIndexRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ready: bool = False


# Component name -> the type the route reads or writes.
MODELS: dict[str, Any] = {
    "ClassifyRequest": ClassifyBody,
    "ClassifyResponse": ClassifyReply,
    "ModelInfo": ModelInfo,
    "ModelList": ModelList,
    "Error": Error,
    "V2Error": V2Error,
    "InferRequest": InferRequest,
    "InferResponse": InferResponseJson,
    "RepositoryIndexRequest": RepositoryIndexRequest,
    # The V2 replies the REST routes write field for field from the V2 plane's own types.
    "ServerMetadata": v2.ServerMetadata,
    "ModelMetadata": v2.ModelMetadata,
    "IndexEntry": v2.IndexEntry,
    # The V2 replies the REST routes write in Triton's form (api/http/v2_info.py).
    "ModelConfig": ModelConfigJson,
    "ModelStatistics": ModelStatisticsJson,
}

REF = "#/components/schemas/{model}"
_MODE: dict[str, JsonSchemaMode] = {"ClassifyRequest": "validation", "InferRequest": "validation",
                                    "RepositoryIndexRequest": "validation"}  # fmt: skip


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


_STATUSES = {
    "400": "invalid argument",
    "401": "missing or unknown bearer token",
    "404": "unknown model or version",
    "408": "request body not received in time",
    "413": "request body over the limit",
    "429": "queue full: retry later",
    "503": "starting or draining: retry on another replica",
    "504": "the call's timeout passed",
}
_TIMEOUT = {
    "name": "timeout",
    "in": "query",
    "required": False,
    "description": "Deadline of the call: seconds (2.5, 2.5s) or milliseconds (250ms); also a header.",
    "schema": {"type": "string"},
}
_NAME = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
_VERSION = {"name": "version", "in": "path", "required": True, "schema": {"type": "string"}}


def _content(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _responses(ok: dict[str, Any], description: str, error: str) -> dict[str, Any]:
    errors = {
        code: {"description": text, "content": _content(_ref(error))} for code, text in _STATUSES.items()
    }
    return {"200": {"description": description, "content": _content(ok)}, **errors}


def _operation(
    tag: str,
    summary: str,
    responses: dict[str, Any],
    parameters: list[dict[str, Any]] | None = None,
    body: str | None = None,
) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "tags": [tag],
        "summary": summary,
        "parameters": parameters or [],
        "responses": responses,
    }
    if body is not None:
        operation["requestBody"] = {"required": True, "content": _content(_ref(body))}
    return operation


def _probe(summary: str, parameters: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    # The protocol's health answers carry no body: 200 for true, 400 for false.
    responses = {"200": {"description": "true"}, "400": {"description": "false"}}
    return {"get": _operation("KServe V2", summary, responses, parameters)}


def _v2(summary: str, ok: dict[str, Any], parameters: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"get": _operation("KServe V2", summary, _responses(ok, "OK", "V2Error"), parameters)}


def openapi_schema(server_version: str) -> dict[str, Any]:
    schemas: dict[str, Any] = {}
    for name, kind in MODELS.items():
        schema = TypeAdapter(kind).json_schema(ref_template=REF, mode=_MODE.get(name, "serialization"))
        schemas.update(schema.pop("$defs", {}))
        schemas[name] = schema
    statistics, config = _ref("ModelStatistics"), _ref("ModelConfig")
    metadata, index = _ref("ModelMetadata"), _ref("IndexEntry")
    api = "JSON API"
    paths: dict[str, Any] = {
        "/v1/models": {
            "get": _operation(
                api,
                "Every served model (latest version): labels, attention modes, limits",
                _responses(_ref("ModelList"), "OK", "Error"),
            )
        },
        "/v1/models/{name}": {
            "get": _operation(
                api,
                "One model",
                _responses(_ref("ModelInfo"), "OK", "Error"),
                [_NAME, {"name": "version", "in": "query", "required": False, "schema": {"type": "string"}}],
            )
        },
        "/v1/models/{name}:classify": {
            "post": _operation(
                api,
                "Classify texts; optionally return attention and top tokens",
                _responses(_ref("ClassifyResponse"), "One result per text", "Error"),
                [_NAME, _TIMEOUT],
                "ClassifyRequest",
            )
        },
        "/v2/health/live": _probe("Live: 200, else 400 (no token needed)"),
        "/v2/health/ready": _probe("Ready: 200 when serving, else 400 (no token needed)"),
        "/v2": _v2("Server metadata: name, version, extensions", _ref("ServerMetadata")),
        "/v2/models/stats": _v2("Statistics of every model version", statistics),
        "/v2/repository/index": {
            "post": _operation(
                "KServe V2",
                "Models and versions of the repository",
                _responses({"type": "array", "items": index}, "OK", "V2Error"),
                body="RepositoryIndexRequest",
            )
        },
    }
    for base, parameters in (
        ("/v2/models/{name}", [_NAME]),
        ("/v2/models/{name}/versions/{version}", [_NAME, _VERSION]),
    ):
        paths[base] = _v2("Model metadata: tensors and versions", metadata, parameters)
        paths[f"{base}/ready"] = _probe("Model ready: 200, else 400", parameters)
        paths[f"{base}/config"] = _v2("Model configuration (Triton's form)", config, parameters)
        paths[f"{base}/stats"] = _v2("Model statistics", statistics, parameters)
        infer = _responses(_ref("InferResponse"), "OK", "V2Error")
        # outputs asked for as binary: the JSON part, then the tensors (Inference-Header-Content-Length)
        infer["200"]["content"]["application/octet-stream"] = {
            "schema": {"type": "string", "format": "binary"}
        }
        paths[f"{base}/infer"] = {
            "post": _operation(
                "KServe V2",
                "Inference: JSON tensors, or JSON then binary data (Inference-Header-Content-Length)",
                infer,
                [*parameters, _TIMEOUT],
                "InferRequest",
            )
        }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "attnserve HTTP API",
            "version": server_version,
            "description": "The JSON API, the KServe V2 REST protocol and the attention explorer (at /). "
            "With --auth, send 'Authorization: Bearer <token>' (health needs none).",
        },
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
        "paths": paths,
    }
