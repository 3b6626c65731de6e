"""The OpenAPI 3.1 description of the HTTP port, served at /openapi.json (and read by /docs).

The JSON API's bodies come from the pydantic models that parse and describe them; the V2
routes are described by path and purpose (their tensors follow the KServe V2 protocol).
"""

from __future__ import annotations

from typing import Any

from attnserve.service.api.http.classify import ClassifyRequest, ClassifyResponse

_ERROR = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "code": {"type": "string", "examples": ["INVALID_ARGUMENT"]},
                "message": {"type": "string"},
            },
            "required": ["code", "message"],
        }
    },
    "required": ["error"],
}
_V2_ERROR = {"type": "object", "properties": {"error": {"type": "string"}}, "required": ["error"]}
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


def _errors(ref: str) -> dict[str, Any]:
    content = {"application/json": {"schema": {"$ref": ref}}}
    return {code: {"description": text, "content": content} for code, text in _STATUSES.items()}


def _json(ref: str, description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": {"$ref": ref}}}}


def _v2(
    summary: str, method: str = "get", *, parameters: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "tags": ["KServe V2"],
        "summary": summary,
        "parameters": parameters or [],
        "responses": {"200": {"description": "OK"}, **_errors("#/components/schemas/V2Error")},
    }
    return {method: operation}


def openapi_schema(server_version: str) -> dict[str, Any]:
    schemas: dict[str, Any] = {"Error": _ERROR, "V2Error": _V2_ERROR}
    for model in (ClassifyRequest, ClassifyResponse):
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    api_errors = _errors("#/components/schemas/Error")
    paths: dict[str, Any] = {
        "/v1/models": {
            "get": {
                "tags": ["JSON API"],
                "summary": "Every served model (latest version): labels, attention modes, limits",
                "responses": {"200": {"description": "OK"}, **api_errors},
            }
        },
        "/v1/models/{name}": {
            "get": {
                "tags": ["JSON API"],
                "summary": "One model",
                "parameters": [
                    _NAME,
                    {"name": "version", "in": "query", "required": False, "schema": {"type": "integer"}},
                ],
                "responses": {"200": {"description": "OK"}, **api_errors},
            }
        },
        "/v1/models/{name}:classify": {
            "post": {
                "tags": ["JSON API"],
                "summary": "Classify texts; optionally return attention and top tokens",
                "parameters": [_NAME, _TIMEOUT],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/ClassifyRequest"}}
                    },
                },
                "responses": {
                    "200": _json("#/components/schemas/ClassifyResponse", "One result per text"),
                    **api_errors,
                },
            }
        },
        "/v2/health/live": _v2("Live: 200, else 400 (no token needed)"),
        "/v2/health/ready": _v2("Ready: 200 when serving, else 400 (no token needed)"),
        "/v2": _v2("Server metadata: name, version, extensions"),
        "/v2/models/stats": _v2("Statistics of every model version"),
        "/v2/repository/index": _v2("Models and versions of the repository", "post"),
    }
    for base, parameters in (
        ("/v2/models/{name}", [_NAME]),
        ("/v2/models/{name}/versions/{version}", [_NAME, _VERSION]),
    ):
        paths[base] = _v2("Model metadata: tensors and versions", parameters=parameters)
        paths[f"{base}/ready"] = _v2("Model ready: 200, else 400", parameters=parameters)
        paths[f"{base}/config"] = _v2("Model configuration (Triton's form)", parameters=parameters)
        paths[f"{base}/stats"] = _v2("Model statistics", parameters=parameters)
        paths[f"{base}/infer"] = _v2(
            "Inference: JSON tensors, or JSON then binary data (Inference-Header-Content-Length)",
            "post",
            parameters=[*parameters, _TIMEOUT],
        )
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
