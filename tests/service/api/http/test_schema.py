"""Property-based tests generated from the HTTP port's own OpenAPI document (Schemathesis)
against a real server: no 5xx, every status documented, and every reply valid against the
schema it is described by; no ERROR record (no traceback) in the server's log."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.generation.case import Case

from attnserve.service.api.http.openapi import openapi_schema
from tests.support.fuzzing import ErrorLog
from tests.support.servers import RunningServer, free_port, make_settings

SCHEMA = schemathesis.openapi.from_dict(openapi_schema(package_version("attnserve")))
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
SERVED = ("car", "pool", "bow")


@pytest.fixture(scope="module")
def served(model_repository: Path) -> Iterator[tuple[int, ErrorLog]]:
    errors = ErrorLog()
    logging.getLogger().addHandler(errors)
    try:
        settings = make_settings(model_repository, http_port=free_port(), max_texts_per_request=8)
        with RunningServer(settings) as running:
            assert running.server is not None
            yield running.server.http_port, errors
    finally:
        logging.getLogger().removeHandler(errors)


@pytest.mark.slow
@SCHEMA.parametrize()
@SCHEMA.given(model=st.sampled_from((None, *SERVED)))
@settings(max_examples=30, deadline=None, database=None, suppress_health_check=list(HealthCheck))
def test_every_operation_keeps_to_its_schema(
    case: Case[Any], model: str | None, served: tuple[int, ErrorLog]
) -> None:
    port, errors = served
    if model is not None and case.path_parameters and "name" in case.path_parameters:
        case.path_parameters["name"] = model  # a served model: past the lookup, into the handler
    response = case.call(base_url=f"http://127.0.0.1:{port}", timeout=30)
    case.validate_response(response, checks=CHECKS)
    assert errors.messages == [], errors.messages


def test_served_replies_keep_to_the_schema(served: tuple[int, ErrorLog]) -> None:
    """The replies a generated case rarely reaches (a valid classify or infer call) are
    checked against the same schema."""
    port, errors = served
    base = f"http://127.0.0.1:{port}"
    classify = {"texts": ["the white car is left", "a car"], "attention": "all", "top_k": 2}
    infer = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1, 1], "data": ["the car"]}]}
    calls: list[tuple[str, str, str, Any]] = [
        ("POST", "/v1/models/{name}:classify", "/v1/models/car:classify", classify),
        ("GET", "/v1/models", "/v1/models", None),
        ("GET", "/v1/models/{name}", "/v1/models/car?version=1", None),
        ("POST", "/v2/models/{name}/infer", "/v2/models/car/infer", infer),
        ("GET", "/v2/models/{name}/versions/{version}", "/v2/models/car/versions/1", None),
        ("GET", "/v2/models/{name}/config", "/v2/models/pool/config", None),
        ("GET", "/v2/models/{name}/stats", "/v2/models/bow/stats", None),
        ("GET", "/v2/models/stats", "/v2/models/stats", None),
        ("POST", "/v2/repository/index", "/v2/repository/index", {"ready": True}),
        ("GET", "/v2", "/v2", None),
    ]
    with requests.Session() as session:
        for method, template, path, body in calls:
            reply = session.request(method, base + path, json=body, timeout=30)
            assert reply.status_code == 200, (path, reply.text[:300])
            SCHEMA[template][method].validate_response(reply)
    assert errors.messages == []
